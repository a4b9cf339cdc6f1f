package containers

import (
	"reflect"
	"testing"
)

// Files as these layouts show them. hybridCgroup is a container of the
// cgroupfs driver on a hybrid host (v1 controllers plus the unified
// hierarchy, runc 1.1), as dockerd 20.10 ran it on the test machines.
var (
	hybridMountinfo = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	hybridCgroup = `9:name=systemd:/docker/` + testID + `
8:pids:/docker/` + testID + `
4:memory:/docker/` + testID + `
2:cpuacct:/docker/` + testID + `
1:cpu:/docker/` + testID + `
0::/docker/` + testID + `
`
	// The unified hierarchy untouched by an older runc: the process sits
	// where its shim was.
	hybridOldRuncCgroup = `9:name=systemd:/docker/` + testID + `
8:pids:/docker/` + testID + `
4:memory:/docker/` + testID + `
0::/
`
	v1Mountinfo = `31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
`
	v1SystemdCgroup = `5:name=systemd:/system.slice/docker-` + testID + `.scope
4:pids:/system.slice/docker-` + testID + `.scope
3:memory:/system.slice/docker-` + testID + `.scope
2:cpu,cpuacct:/system.slice/docker-` + testID + `.scope
`
	v2Mountinfo = `25 1 0:23 / / rw - ext4 /dev/sda1 rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	v2SystemdCgroup = "0::/system.slice/docker-" + testID + ".scope\n"
	v2KubeCgroup    = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-" + testID + ".scope\n"
	// An agent that itself runs in a cgroup namespace sees only part of
	// the tree mounted, and paths relative to its namespace's root.
	v2PartMountinfo = `30 25 0:26 /agent /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
)

func TestParseProcCgroupReadsEveryLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want []cgroupLine
	}{
		{"hybrid", hybridCgroup, []cgroupLine{
			{9, []string{"name=systemd"}, "/docker/" + testID},
			{8, []string{"pids"}, "/docker/" + testID},
			{4, []string{"memory"}, "/docker/" + testID},
			{2, []string{"cpuacct"}, "/docker/" + testID},
			{1, []string{"cpu"}, "/docker/" + testID},
			{0, nil, "/docker/" + testID},
		}},
		{"v1 with systemd scopes and combined controllers", v1SystemdCgroup, []cgroupLine{
			{5, []string{"name=systemd"}, "/system.slice/docker-" + testID + ".scope"},
			{4, []string{"pids"}, "/system.slice/docker-" + testID + ".scope"},
			{3, []string{"memory"}, "/system.slice/docker-" + testID + ".scope"},
			{2, []string{"cpu", "cpuacct"}, "/system.slice/docker-" + testID + ".scope"},
		}},
		{"v2", v2SystemdCgroup, []cgroupLine{{0, nil, "/system.slice/docker-" + testID + ".scope"}}},
		{"path with a colon", "0::/weird:name\n", []cgroupLine{{0, nil, "/weird:name"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcCgroup(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseProcCgroupRefusesMalformedFiles(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"empty", ""},
		{"no fields", "garbage\n"},
		{"hierarchy not a number", "x::/\n"},
		{"relative path", "0::docker/" + testID + "\n"},
		// A cgroup name with a newline could make a second line.
		{"hierarchy listed twice", "0::/user.slice/x\n0::/docker/" + testID + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := parseProcCgroup(tc.data); err == nil {
				t.Errorf("parsed %q as %+v", tc.data, got)
			}
		})
	}
}

func TestParseCgroupMountsFindsEveryHierarchy(t *testing.T) {
	got := parseCgroupMounts(hybridMountinfo + `50 22 0:40 / /mnt/with\040space rw - cgroup2 cgroup2 rw
51 22 0:41 / /proc/fs/nfsd rw - nfsd nfsd rw
`)
	want := []cgroupMount{
		{point: "/sys/fs/cgroup/cpu", root: "/", opts: []string{"rw", "cpu"}},
		{point: "/sys/fs/cgroup/cpuacct", root: "/", opts: []string{"rw", "cpuacct"}},
		{point: "/sys/fs/cgroup/memory", root: "/", opts: []string{"rw", "memory"}},
		{point: "/sys/fs/cgroup/pids", root: "/", opts: []string{"rw", "pids"}},
		{point: "/sys/fs/cgroup/systemd", root: "/", opts: []string{"rw", "xattr", "name=systemd"}},
		{point: "/sys/fs/cgroup/unified", root: "/", v2: true},
		{point: "/mnt/with space", root: "/", v2: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestHoldsIDOnlyForTheContainersOwnCgroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		want bool
	}{
		{"cgroupfs", "/docker/" + testID, true},
		{"cgroupfs with a parent of its own", "/mcptrace-test-1-2-3/" + testID, true},
		{"systemd scope", "/system.slice/docker-" + testID + ".scope", true},
		{"kubernetes containerd scope", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-" + testID + ".scope", true},
		{"trailing slash", "/docker/" + testID + "/", true},
		{"another container", "/docker/" + otherID, false},
		{"a cgroup below the container's", "/docker/" + testID + "/init", false},
		{"the container's parent", "/docker", false},
		{"root", "/", false},
		{"short ID", "/docker/" + testShort, false},
		{"longer hex run", "/docker/" + testID + "0", false},
		{"hex before it", "/docker/f" + testID, false},
		{"ID in a parent only", "/" + testID + "/sub", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := holdsID(tc.path, testID); got != tc.want {
				t.Errorf("holdsID(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

func TestHeldIDFindsTheIDInTheLastElement(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/docker/" + testID, testID},
		{"/system.slice/docker-" + testID + ".scope", testID},
		{"/docker/" + testID + "0", ""},
		{"/" + testID + "/init", ""},
		{"/user.slice/user-0.slice/session-3.scope", ""},
		{"/", ""},
	} {
		if got := heldID(tc.path); got != tc.want {
			t.Errorf("heldID(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestFindCgroupDirPrefersTheUnifiedHierarchy(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, cgroup, id string
		dirs                        []string // that exist
		want                        string   // "" for an error
	}{
		{
			name: "hybrid: the unified directory, for cgroup.kill", mountinfo: hybridMountinfo, cgroup: hybridCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/unified/docker/" + testID, "/sys/fs/cgroup/pids/docker/" + testID},
			want: "/sys/fs/cgroup/unified/docker/" + testID,
		},
		{
			name: "hybrid with an older runc: the pids directory", mountinfo: hybridMountinfo, cgroup: hybridOldRuncCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids/docker/" + testID},
			want: "/sys/fs/cgroup/pids/docker/" + testID,
		},
		{
			name: "v1 systemd scopes", mountinfo: v1Mountinfo, cgroup: v1SystemdCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/pids/system.slice/docker-" + testID + ".scope"},
			want: "/sys/fs/cgroup/pids/system.slice/docker-" + testID + ".scope",
		},
		{
			name: "v1 without a pids hierarchy: memory", mountinfo: v1Mountinfo, cgroup: v1SystemdCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/memory/system.slice/docker-" + testID + ".scope"},
			want: "/sys/fs/cgroup/memory/system.slice/docker-" + testID + ".scope",
		},
		{
			name: "v2 systemd scope", mountinfo: v2Mountinfo, cgroup: v2SystemdCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/system.slice/docker-" + testID + ".scope"},
			want: "/sys/fs/cgroup/system.slice/docker-" + testID + ".scope",
		},
		{
			name: "kubernetes", mountinfo: v2Mountinfo, cgroup: v2KubeCgroup, id: testID,
			dirs: []string{"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-" + testID + ".scope"},
			want: "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-" + testID + ".scope",
		},
		{
			name: "only part of the tree mounted", mountinfo: v2PartMountinfo, cgroup: "0::/agent/docker/" + testID + "\n", id: testID,
			dirs: []string{"/sys/fs/cgroup/docker/" + testID},
			want: "/sys/fs/cgroup/docker/" + testID,
		},
		{
			name: "cgroup outside the mounted part", mountinfo: v2PartMountinfo, cgroup: "0::/docker/" + testID + "\n", id: testID,
			dirs: []string{"/sys/fs/cgroup/docker/" + testID},
		},
		{
			name: "another container's ID", mountinfo: hybridMountinfo, cgroup: hybridCgroup, id: otherID,
			dirs: []string{"/sys/fs/cgroup/unified/docker/" + testID, "/sys/fs/cgroup/pids/docker/" + testID},
		},
		{
			name: "a process on the host", mountinfo: hybridMountinfo, id: testID,
			cgroup: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/8ec5452a6c7de5ebb78400028fb0f66c\n0::/\n",
			dirs:   []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory/process_api/8ec5452a6c7de5ebb78400028fb0f66c"},
		},
		{
			name: "a process in a cgroup below the container's", mountinfo: v2Mountinfo, id: testID,
			cgroup: "0::/system.slice/docker-" + testID + ".scope/payload\n",
			dirs:   []string{"/sys/fs/cgroup/system.slice/docker-" + testID + ".scope/payload"},
		},
		{
			name: "directory gone", mountinfo: v2Mountinfo, cgroup: v2SystemdCgroup, id: testID,
		},
		{
			name: "not a full ID", mountinfo: hybridMountinfo, cgroup: hybridCgroup, id: testShort,
			dirs: []string{"/sys/fs/cgroup/unified/docker/" + testID},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := parseProcCgroup(tc.cgroup)
			if err != nil {
				t.Fatal(err)
			}
			exists := func(d string) bool {
				for _, x := range tc.dirs {
					if x == d {
						return true
					}
				}
				return false
			}
			got, err := findCgroupDir(lines, parseCgroupMounts(tc.mountinfo), tc.id, exists)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("found %s, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLocateMapsADirectoryToItsCgroup(t *testing.T) {
	mounts := parseCgroupMounts(hybridMountinfo + v2PartMountinfo)
	for _, tc := range []struct {
		dir, point, cgroup string
		ok                 bool
	}{
		{"/sys/fs/cgroup/pids/docker/" + testID, "/sys/fs/cgroup/pids", "/docker/" + testID, true},
		{"/sys/fs/cgroup/unified/docker/" + testID + "/", "/sys/fs/cgroup/unified", "/docker/" + testID, true},
		{"/sys/fs/cgroup/unified/../pids/x", "/sys/fs/cgroup/pids", "/x", true},
		{"/sys/fs/cgroup/docker/" + testID, "/sys/fs/cgroup", "/agent/docker/" + testID, true},
		{"/sys/fs/cgroupfoo/x", "", "", false},
		{"/tmp", "", "", false},
	} {
		m, cg, ok := locate(mounts, tc.dir)
		if ok != tc.ok || ok && (m.point != tc.point || cg != tc.cgroup) {
			t.Errorf("locate(%s) = %s %s %v, want %s %s %v", tc.dir, m.point, cg, ok, tc.point, tc.cgroup, tc.ok)
		}
	}
}

func TestInCgroupMatchesTheCgroupAndItsDescendantsOnly(t *testing.T) {
	mounts := parseCgroupMounts(hybridMountinfo)
	var pids, unified cgroupMount
	for _, m := range mounts {
		switch m.point {
		case "/sys/fs/cgroup/pids":
			pids = m
		case "/sys/fs/cgroup/unified":
			unified = m
		}
	}
	cg := "/docker/" + testID
	for _, tc := range []struct {
		name   string
		m      cgroupMount
		cgroup string
		want   bool
	}{
		{"the container's cgroup", pids, hybridCgroup, true},
		{"the container's cgroup, unified", unified, hybridCgroup, true},
		{"a cgroup below it", unified, "0::/docker/" + testID + "/sub\n", true},
		{"a sibling whose name extends it", pids, "8:pids:/docker/" + testID + "-x\n0::/\n", false},
		{"another container", pids, "8:pids:/docker/" + otherID + "\n", false},
		{"elsewhere in this hierarchy, in the container in another", pids, "8:pids:/\n0::/docker/" + testID + "\n", false},
		{"no line of this hierarchy", pids, "0::/docker/" + testID + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := parseProcCgroup(tc.cgroup)
			if err != nil {
				t.Fatal(err)
			}
			if got := inCgroup(lines, tc.m, cg); got != tc.want {
				t.Errorf("inCgroup = %v, want %v", got, tc.want)
			}
		})
	}
}
