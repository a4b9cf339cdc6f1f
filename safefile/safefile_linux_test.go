package safefile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// other is another local user: the attacker of these tests.
const other = 65534

func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){
		// exchange swaps the two paths in its arguments with
		// renameat2(RENAME_EXCHANGE) until its stdin closes, then prints
		// how many swaps it made.
		"exchange": func() {
			a, b := os.Getenv("EXCHANGE_A"), os.Getenv("EXCHANGE_B")
			done := make(chan struct{})
			go func() { bufio.NewReader(os.Stdin).ReadByte(); close(done) }()
			n := 0
			os.Stdout.WriteString("ready\n")
			for {
				select {
				case <-done:
					fmt.Println(n)
					return
				default:
				}
				if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				n++
			}
		},
	})
	os.Exit(m.Run())
}

// world is a directory laid out as a shared machine's /tmp: root's,
// sticky and writable by all, holding a root-only directory with root's
// configuration, a directory of another user, and links.
type world struct {
	top      string // root's, 1777
	rootOnly string // root's, 0700, holds root's .claude.json
	theirs   string // other's, 0755
	original []byte // root's .claude.json
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the attacks are another user's against root")
	}
	top, err := os.MkdirTemp("", "mcptrace-safefile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	w := &world{top: top, rootOnly: filepath.Join(top, "root-only"), theirs: filepath.Join(top, "theirs"),
		original: []byte(`{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/root"]}}}` + "\n")}
	must(t, os.Chmod(top, 0o777|os.ModeSticky), os.Mkdir(w.rootOnly, 0o700), os.Mkdir(w.theirs, 0o755), os.Chown(w.theirs, other, other),
		os.WriteFile(filepath.Join(w.rootOnly, ".claude.json"), w.original, 0o600))
	return w
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// symlinkAs makes a symbolic link at name to target owned by uid.
func symlinkAs(t *testing.T, target, name string, uid int) {
	t.Helper()
	must(t, os.Symlink(target, name), os.Lchown(name, uid, uid))
}

// untouched fails t unless root's directory holds its configuration
// alone, with its original bytes.
func (w *world) untouched(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(w.rootOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != ".claude.json" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("root's directory holds %v, want .claude.json alone: something was written outside the named file's directory", names)
	}
	if b, err := os.ReadFile(filepath.Join(w.rootOnly, ".claude.json")); err != nil || !bytes.Equal(b, w.original) {
		t.Fatalf("root's .claude.json = %q, %v; want its original bytes", b, err)
	}
}

func notYours(t *testing.T, err error, what string, owner uint32) {
	t.Helper()
	var ny *NotYoursError
	if !errors.As(err, &ny) || ny.What != what || ny.Owner != owner {
		t.Fatalf("err = %v, want the %s of uid %d refused", err, what, owner)
	}
}

// A symbolic link at FILE, or a directory on its path, of another user
// is refused, never followed; so is a file of another user that would
// be replaced. Root's own link is followed, and the file is replaced in
// its real directory, with its owner, group and mode kept and the
// original bytes in the backup.
func TestOpenTrustsOnlyRootAndTheCaller(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.rootOnly, ".claude.json")

	theirLink := filepath.Join(w.top, "their-link.json")
	symlinkAs(t, root, theirLink, other)
	_, err := Open(theirLink, Write)
	notYours(t, err, "symbolic link", other)

	theirDirLink := filepath.Join(w.top, "their-dir-link")
	symlinkAs(t, w.rootOnly, theirDirLink, other)
	_, err = Open(filepath.Join(theirDirLink, ".claude.json"), Read)
	notYours(t, err, "symbolic link", other)

	theirs := filepath.Join(w.theirs, "config.json")
	must(t, os.WriteFile(theirs, []byte("{}"), 0o644), os.Chown(theirs, other, other))
	_, err = Open(theirs, Write)
	notYours(t, err, "directory", other)
	inTheirs := filepath.Join(w.theirs, "sub")
	must(t, os.Mkdir(inTheirs, 0o755), os.WriteFile(filepath.Join(inTheirs, "x.json"), []byte("{}"), 0o600))
	_, err = Open(filepath.Join(inTheirs, "x.json"), Read)
	notYours(t, err, "directory", other)

	// Their file in root's directory.
	theirFile := filepath.Join(w.top, "their.json")
	must(t, os.WriteFile(theirFile, []byte("{}"), 0o644), os.Chown(theirFile, other, other))
	_, err = Open(theirFile, Write)
	notYours(t, err, "file", other)
	if _, err := Open(theirFile, Read); err == nil {
		t.Error("root read another user's file in root's directory")
	}
	w.untouched(t)

	// Root's own link (a dotfiles checkout) is followed; the file is
	// replaced where it really is, with its owner, group and mode.
	mine := filepath.Join(w.top, "mine")
	must(t, os.Mkdir(mine, 0o755))
	file := filepath.Join(mine, "config.json")
	must(t, os.WriteFile(file, []byte("old\n"), 0o640), os.Chown(file, 0, 4242), os.Chmod(file, 0o640))
	link := filepath.Join(w.top, "my-link.json")
	symlinkAs(t, "mine/config.json", link, 0)
	f, err := Open(link, Write)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Dir != mine || f.Base != "config.json" || string(f.Data) != "old\n" {
		t.Fatalf("opened %s/%s holding %q, want %s/config.json holding old", f.Dir, f.Base, f.Data, mine)
	}
	backup, err := f.Replace([]byte("new\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, data string
	}{{file, "new\n"}, {backup, "old\n"}} {
		b, err := os.ReadFile(c.path)
		var st unix.Stat_t
		must(t, err, unix.Lstat(c.path, &st))
		if string(b) != c.data || st.Uid != 0 || st.Gid != 4242 || st.Mode&0o7777 != 0o640 {
			t.Errorf("%s: %q uid %d gid %d mode %04o; want %q, root, 4242, 0640", c.path, b, st.Uid, st.Gid, st.Mode&0o7777, c.data)
		}
	}
	if filepath.Dir(backup) != mine {
		t.Errorf("backup %s, want it beside the real file", backup)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link is no longer a link: %v", err)
	}
}

// The file at the name replaced since it was read (by its owner, by an
// editor) is not overwritten: the backup holds what was read.
func TestReplaceRefusesAFileThatChangedSinceItWasRead(t *testing.T) {
	w := newWorld(t)
	file := filepath.Join(w.rootOnly, ".claude.json")
	f, err := Open(file, Write)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	newer := filepath.Join(w.rootOnly, "newer")
	must(t, os.WriteFile(newer, []byte("newer\n"), 0o600), os.Rename(newer, file))
	backup, err := f.Replace([]byte("wrapped\n"))
	if !errors.Is(err, ErrChanged) || backup != "" {
		t.Fatalf("Replace = %q, %v; want ErrChanged", backup, err)
	}
	if b, _ := os.ReadFile(file); string(b) != "newer\n" {
		t.Errorf("the newer file was overwritten: %q", b)
	}
	ents, _ := os.ReadDir(w.rootOnly)
	if len(ents) != 2 {
		t.Errorf("%d entries, want the file and the backup (no temporary file left)", len(ents))
	}
}

// The review's attack (issue 30): another user owns a directory on the
// path of the file root rewrites, and swaps it with
// renameat2(RENAME_EXCHANGE) for a link into a root-only directory, in a
// loop, while root opens and (were it let) replaces the file. Root never
// follows the link and never writes outside the named file's real
// directory, and root's own configuration keeps its bytes, whatever
// moment each try meets. Bounded: at least 1,000 tries in 20 s, and
// both shapes of the path met (or the race proved nothing).
func TestDirectoryExchangeRaceNeverMovesRootsWrite(t *testing.T) {
	w := newWorld(t)
	// In their directory, a file of root's: only the directory is theirs.
	named := filepath.Join(w.theirs, ".claude.json")
	must(t, os.WriteFile(named, []byte("{}\n"), 0o600))
	link := filepath.Join(w.top, "swap")
	symlinkAs(t, w.rootOnly, link, other)

	cmd := exec.Command(testenv.SelfForEveryone(t), "-test.run=^$")
	cmd.Env = testenv.HelperEnv("exchange", "EXCHANGE_A="+w.theirs, "EXCHANGE_B="+link)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other}}
	stdin, out := testenv.StartPiped(t, cmd)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("the exchanger did not start: %q", out.Text())
	}
	swaps := -1
	defer func() {
		if swaps < 0 {
			stdin.Close()
			cmd.Process.Kill()
		}
	}()

	const tries, bound = 1000, 20 * time.Second
	seen := map[string]int{}
	deadline := time.Now().Add(bound)
	n := 0
	for ; n < tries || len(seen) < 2 && time.Now().Before(deadline); n++ {
		if time.Now().After(deadline) {
			break
		}
		f, err := Open(named, Write)
		if err == nil {
			// Never: but had it opened, show where it would write.
			backup, rerr := f.Replace([]byte("attacker's server\n"))
			f.Close()
			t.Fatalf("try %d: opened %s/%s through another user's directory or link; Replace wrote %s (%v)", n, f.Dir, f.Base, backup, rerr)
		}
		var ny *NotYoursError
		if !errors.As(err, &ny) || ny.Owner != other || ny.Path != w.theirs {
			t.Fatalf("try %d: %v, want the path refused at %s, uid %d's", n, err, w.theirs, other)
		}
		seen[ny.What]++
	}
	stdin.Close()
	if out.Scan() {
		swaps, _ = strconv.Atoi(out.Text())
	}
	cmd.Wait()
	t.Logf("%d tries in %s against %d exchanges: refused %v", n, time.Since(deadline.Add(-bound)).Round(time.Millisecond), swaps, seen)
	if n < tries || len(seen) < 2 {
		t.Fatalf("%d tries met the path as %v: the race did not run both ways", n, seen)
	}
	w.untouched(t)
	// Their directory, wherever the last swap left it, holds root's file
	// alone, unchanged.
	for _, d := range []string{w.theirs, link} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			ents, _ := os.ReadDir(d)
			b, _ := os.ReadFile(filepath.Join(d, ".claude.json"))
			if len(ents) != 1 || string(b) != "{}\n" {
				t.Errorf("their directory now holds %d entries, .claude.json %q", len(ents), b)
			}
		}
	}
}
