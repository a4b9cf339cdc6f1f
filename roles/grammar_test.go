package roles

import (
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// The security review's reproductions: a secret that redact does not
// recognise became the name.
func TestReviewedSecretsNeverBecomeTheName(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npx", "--otp", "123456", "pkg"}, "pkg", true},
		{[]string{"podman", "run", "--rm", "-i", "--no-hostname", "ghcr.io/x/y", "S3cr3tValue"}, "ghcr.io/x/y", true},
		{[]string{"npx", "user:S3cr3tValue@github.com"}, "", true},
	})
}

func TestKnownOptionsSkipTheirValue(t *testing.T) {
	runIdentity(t, []identityCase{
		// npm's options that take a value.
		{[]string{"npx", "--otp", "123456", "pkg"}, "pkg", true},
		{[]string{"npx", "--otp=123456", "pkg"}, "pkg", true},
		{[]string{"npm", "--otp", "123456", "exec", "pkg"}, "pkg", true},
		{[]string{"npm", "exec", "--otp", "123456", "--", "pkg"}, "pkg", true},
		{[]string{"npx", "--userconfig", "/home/u/s3cr3t", "pkg"}, "pkg", true},
		{[]string{"npx", "--globalconfig", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--prefix", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "-w", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--workspace", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--include", "s3cr3tvalue", "--omit", "dev", "pkg"}, "pkg", true},
		{[]string{"npx", "--node-options", "--max-old-space-size=1", "pkg"}, "pkg", true},
		{[]string{"npx", "--script-shell", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--before", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--tag", "s3cr3tvalue", "--scope", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "--auth-type", "s3cr3tvalue", "pkg"}, "pkg", true},
		{[]string{"npx", "-w=s3cr3tvalue", "pkg"}, "pkg", true},
		// npm's switches, --no-X among them.
		{[]string{"npx", "-y", "--prefer-offline", "--no-audit", "--ignore-scripts", "pkg"}, "pkg", true},
		{[]string{"npx", "--no", "pkg"}, "pkg", true},
		{[]string{"pnpm", "-w", "--silent", "dlx", "pkg"}, "pkg", true},
		{[]string{"bunx", "--bun", "--silent", "pkg"}, "pkg", true},
		// docker's and podman's switches...
		{[]string{"podman", "run", "--rootfs", "ghcr.io/x/y", "S3cr3tValue"}, "ghcr.io/x/y", true},
		// redact reads --passwd as a secret's flag and hides what follows.
		{[]string{"podman", "run", "--passwd", "ghcr.io/x/y", "S3cr3tValue"}, redact.Marker, true},
		{[]string{"podman", "run", "--passwd", "--rm", "ghcr.io/x/y", "S3cr3tValue"}, "ghcr.io/x/y", true},
		{[]string{"podman", "run", "--unsetenv-all", "--replace", "--rmi", "ghcr.io/x/y", "s3cr3tvalue"}, "ghcr.io/x/y", true},
		{[]string{"podman", "run", "--no-hosts", "--read-only-tmpfs", "--env-host", "ghcr.io/x/y", "s3cr3tvalue"}, "ghcr.io/x/y", true},
		{[]string{"podman", "run", "--tls-verify=false", "--sig-proxy=false", "--http-proxy=false", "img", "s3cr3tvalue"}, "img", true},
		{[]string{"docker", "run", "--init", "--privileged", "--read-only", "-P", "--publish-all", "img", "s3cr3tvalue"}, "img", true},
		{[]string{"docker", "run", "--no-healthcheck", "--oom-kill-disable", "--disable-content-trust", "-q", "img", "x"}, "img", true},
		{[]string{"docker", "run", "--interactive", "--tty", "--detach", "--help", "img"}, "img", true},
		// ...and those that take a value.
		{[]string{"docker", "run", "-e", "K=s3cr3tvalue", "--env", "K", "--env-file", "/e", "img"}, "img", true},
		{[]string{"docker", "run", "--mount", "type=bind,src=/a,dst=/b", "-p", "1:1", "--name", "n", "img"}, "img", true},
		{[]string{"docker", "run", "-u", "1000", "-w", "/w", "--entrypoint", "sh", "-l", "a=b", "-h", "host", "img"}, "img", true},
		{[]string{"docker", "run", "--cpus", "1", "-m", "1g", "--restart", "no", "--pull", "always", "--platform", "linux/amd64", "img"}, "img", true},
		{[]string{"docker", "run", "--secret", "s3cr3tvalue", "--creds", "user:s3cr3tvalue", "--authfile", "/a", "img"}, "img", true},
		{[]string{"docker", "run", "-c", "512", "-a", "stdout", "--detach-keys", "ctrl-x", "--tz", "UTC", "img"}, "img", true},
		{[]string{"podman", "run", "--decryption-key", "s3cr3tvalue", "--cert-dir", "/c", "--pod", "p", "img"}, "img", true},
		{[]string{"docker", "run", "-itp", "1:1", "-eK=s3cr3tvalue", "img"}, "img", true},
		// Python runners.
		{[]string{"uvx", "--isolated", "-q", "--python", "3.12", "pkg"}, "pkg", true},
		{[]string{"uvx", "-qp3.12", "pkg"}, "pkg", true},
		{[]string{"pipx", "run", "--no-cache", "--fetch-missing-python", "pkg"}, "pkg", true},
		{[]string{"python3", "-I", "-B", "-m", "mod"}, "mod", false},
	})
}

func TestUnknownFlagsNameNothing(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npx", "--frobnicate", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"npx", "--token", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"npx", "--frobnicate=1", "pkg"}, "", true},
		{[]string{"npx", "-Z", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"npx", "-ys3cr3tvalue", "pkg"}, "", true},
		{[]string{"npx", "-p", "pkg", "--frob", "s3cr3tvalue", "bin"}, "", true},
		// A switch then true|false: npm exec reads the word as its value,
		// npx as the package.
		{[]string{"npx", "--yes", "false", "pkg"}, "", true},
		// Before the subcommand, an unknown option's value is read as the
		// subcommand: no wrapper; read as a switch, a wrapper naming nothing.
		{[]string{"npm", "--frob", "s3cr3tvalue", "exec", "pkg"}, "", false},
		{[]string{"npm", "--frob", "exec", "pkg"}, "", true},
		{[]string{"npm", "exec", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"bunx", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"pnpm", "dlx", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"pnpm", "--frob", "s3cr3tvalue", "dlx", "pkg"}, "", false},
		{[]string{"yarn", "dlx", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"docker", "run", "--frob", "s3cr3tvalue", "img"}, "", true},
		{[]string{"docker", "run", "-itZ", "s3cr3tvalue", "img"}, "", true},
		{[]string{"docker", "run", "--frob=1", "img"}, "", true},
		{[]string{"docker", "--frob", "s3cr3tvalue", "run", "img"}, "", true},
		{[]string{"podman", "run", "--rm", "--some-new-switch", "ghcr.io/x/y", "s3cr3tvalue"}, "", true},
		{[]string{"docker", "compose", "run", "--frob", "s3cr3tvalue", "svc"}, "", true},
		{[]string{"docker", "compose", "--frob", "s3cr3tvalue", "run", "svc"}, "", true},
		{[]string{"uvx", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"uvx", "-qZ", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"uv", "--frob", "s3cr3tvalue", "tool", "run", "pkg"}, "", false},
		{[]string{"uv", "tool", "--frob", "s3cr3tvalue", "run", "pkg"}, "", false},
		{[]string{"uv", "run", "--frob", "s3cr3tvalue", "-m", "mod"}, "", true},
		{[]string{"uv", "--frob", "s3cr3tvalue", "run", "server.py"}, "", false},
		{[]string{"pipx", "run", "--frob", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"pipx", "--frob", "s3cr3tvalue", "run", "pkg"}, "", false},
		{[]string{"pipx", "--frob", "run", "pkg"}, "", true},
		{[]string{"uv", "--frob", "tool", "run", "pkg"}, "", true},
		{[]string{"python3", "-Z", "s3cr3tvalue", "-m", "mod"}, "", false},
		{[]string{"python3", "--frob", "s3cr3tvalue", "-m", "mod"}, "", false},
	})
	// Name falls back to the interpreter, not to what follows the flag.
	if n := Name(proc(img("python3", "--frob", "s3cr3tvalue", "server.py"))); n != "python3" {
		t.Errorf("Name = %q, want python3", n)
	}
}

func TestSpecsOutsideTheirGrammarNameNothing(t *testing.T) {
	runIdentity(t, []identityCase{
		// npm: a package name (lowercase) with a version, tag or range.
		{[]string{"npx", "user:S3cr3tValue@github.com"}, "", true},
		{[]string{"npx", "user:s3cr3tvalue@github.com"}, "", true},
		{[]string{"npx", "s3cr3tvalue@github.com/org/repo"}, "", true},
		{[]string{"npx", "pkg@user:s3cr3tvalue"}, "", true},
		{[]string{"npx", "S3cr3tValue"}, "", true},
		{[]string{"npx", "@Scope/pkg"}, "", true},
		{[]string{"npx", "@scope/pkg/extra"}, "", true},
		{[]string{"npx", "_pkg"}, "", true},
		{[]string{"npx", "owner/repo@v1"}, "", true},
		{[]string{"npx", "a/b/c"}, "", true},
		{[]string{"npx", "git@github.com:org/repo.git"}, "", true},
		{[]string{"npx", "ssh:s3cr3tvalue"}, "", true},
		{[]string{"npx", "-p", "user:s3cr3tvalue@host", "bin"}, "", true},
		{[]string{"pnpm", "--package=user:s3cr3tvalue@host", "dlx", "bin"}, "", true},
		// Images.
		{[]string{"docker", "run", "-i", "user:S3cr3tValue@host/img"}, "", true},
		{[]string{"docker", "run", "-i", "user:s3cr3tvalue@host/img"}, "", true},
		{[]string{"docker", "run", "-i", "S3cr3tValue"}, "", true},
		{[]string{"docker", "run", "-i", "docker://img"}, "", true},
		{[]string{"docker", "run", "-i", "img@sha256:0123"}, "", true},
		{[]string{"docker", "run", "-i", "img:-tag"}, "", true},
		{[]string{"docker", "compose", "run", "svc:s3cr3tvalue"}, "", true},
		// Python distributions and modules.
		{[]string{"uvx", "user:S3cr3tValue@host"}, "", true},
		{[]string{"uvx", "-pkg-"}, "", true},
		{[]string{"uvx", "--from", "user:s3cr3tvalue@host", "cmd"}, "", true},
		{[]string{"pipx", "run", "--spec", "user:s3cr3tvalue", "cmd"}, "", true},
		{[]string{"pipx", "run", "user:s3cr3tvalue@host"}, "", true},
		{[]string{"python3", "-m", "user:s3cr3tvalue"}, "", false},
		{[]string{"python3", "-m", "1mod"}, "", false},
		{[]string{"python3", "-m", "pkg..mod"}, "", false},
		{[]string{"uv", "run", "-m", "user:s3cr3tvalue"}, "", true},
		{[]string{"uv", "run", "python", "-m", "user:s3cr3tvalue"}, "", true},
		// A hidden element in a name's place still shows as hidden.
		{[]string{"npx", ghToken + ":x"}, redact.Marker, true},
	})
}

func TestCredentialURLsNameTheirLastPathElementOnly(t *testing.T) {
	for _, tc := range []struct{ spec, npm, py string }{
		{"git+https://user:tok@host/org/repo.git", "repo", "repo"},
		{"git+https://user:tok@host/org/repo.git#main", "repo", "repo"},
		{"git+https://user:tok@host/org/repo@v1", "", "repo"},
		{"git+https://user:tok@host", "", ""},
		{"git+https://user:tok@host/", "", ""},
		{"git+https://user:tok@host?x=/a", "", ""},
		{"git+https://user:tok@host#/a", "", ""},
		{"https://tok@host", "", ""},
		{"https://user:tok@host/repo.tgz", "repo", "repo"},
		{"git://user:tok@host", "", ""},
		{"git+ssh://git@github.com:org/repo.git#v1", "repo", "repo"},
		{"git+ssh://user:tok@host", "", ""},
		{"github:tok@host", "", ""},
		{"github:acme/repo#v2", "repo", ""},
		{"file:/x/user:tok@host", "", ""},
		{"/x/user:tok@host", "", ""},
		{`C:\x\user:tok@host`, "", ""},
		{"./user:tok@host/", "", ""},
	} {
		if got := npmSpec(tc.spec); got != tc.npm {
			t.Errorf("npmSpec(%q) = %q, want %q", tc.spec, got, tc.npm)
		}
		if got := pySpec(tc.spec); got != tc.py {
			t.Errorf("pySpec(%q) = %q, want %q", tc.spec, got, tc.py)
		}
		for _, argv := range [][]string{
			{"npx", "-y", tc.spec}, {"npx", "-p", tc.spec, "bin"}, {"uvx", tc.spec},
			{"uvx", "--from", tc.spec, "cmd"}, {"pipx", "run", "--spec", tc.spec, "cmd"},
			{"sh", "-c", "npx -y '" + tc.spec + "'"},
		} {
			name, _ := Identity(img(argv...))
			if strings.Contains(name, "user") || strings.Contains(name, "tok") || strings.Contains(name, "host") {
				t.Errorf("Identity(%q) = %q", argv, name)
			}
		}
	}
}

func TestNodeNamesOnlyWhatLooksLikeAScript(t *testing.T) {
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{[]string{"node", "--unknown-option", "S3cr3tValue99", "server.js"}, "node"},
		{[]string{"bun", "--unknown-option", "S3cr3tValue99"}, "bun"},
		{[]string{"node", "server.js"}, "server"},
		{[]string{"node", "/srv/app/build/main.mjs"}, "main"},
	} {
		p := lineage.Process{ID: lineage.ID{PID: 5, Start: 1}, Images: []lineage.Image{{Filename: "/usr/bin/" + tt.argv[0], Argv: tt.argv, Source: lineage.SourceKernel}}}
		if got := Name(p); got != tt.want {
			t.Errorf("Name(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}
