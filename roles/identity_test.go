package roles

import (
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// identityCase is an argv, the identity it names and whether it wraps.
type identityCase struct {
	argv    []string
	name    string
	wrapper bool
}

func img(argv ...string) lineage.Image {
	return lineage.Image{Filename: argv[0], Argv: argv}
}

func runIdentity(t *testing.T, cases []identityCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(tc.argv, " "), func(t *testing.T) {
			name, wrapper := Identity(img(tc.argv...))
			if name != tc.name || wrapper != tc.wrapper {
				t.Errorf("Identity(%q) = %q, %v; want %q, %v", tc.argv, name, wrapper, tc.name, tc.wrapper)
			}
		})
	}
}

func TestNpxChainEndsInTheNamedPackage(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"}, "@modelcontextprotocol/server-filesystem", true},
		{[]string{"/usr/bin/npx", "--no-install", "@modelcontextprotocol/server-filesystem", "/tmp/d"}, "@modelcontextprotocol/server-filesystem", true},
		{[]string{"npx", "--yes", "--quiet", "--prefer-offline", "mcp-remote@0.1.2", "https://x.example/sse"}, "mcp-remote", true},
		{[]string{"npx", "--loglevel", "silent", "--registry", "https://r.example", "--cache", "/c", "pkg"}, "pkg", true},
		{[]string{"npx", "--loglevel=silent", "--registry=https://r.example", "--", "@scope/pkg@latest", "--port", "1"}, "@scope/pkg", true},
		{[]string{"npx", "-p", "@scope/tools@2", "tool-server"}, "@scope/tools", true},
		{[]string{"npx", "--package=@scope/tools", "--", "tool-server"}, "@scope/tools", true},
		{[]string{"npx", "--package", "pkg", "-c", "pkg-bin --x"}, "pkg", true},
		{[]string{"npx", "-c", "mcp-server-x --flag"}, "", true},
		{[]string{"npx"}, "", true},
		// node running npm's bin shims, directly or through the shebang.
		{[]string{"node", "/usr/bin/npx", "--no-install", "@modelcontextprotocol/server-filesystem", "/tmp/d"}, "@modelcontextprotocol/server-filesystem", true},
		{[]string{"/usr/bin/env", "node", "/usr/bin/npx", "-y", "pkg"}, "pkg", true},
		{[]string{"node", "/usr/lib/node_modules/npm/bin/npx-cli.js", "-y", "pkg@1"}, "pkg", true},
		{[]string{"node", "--max-old-space-size=4096", "/usr/lib/node_modules/npm/bin/npm-cli.js", "exec", "--yes", "--", "pkg"}, "pkg", true},
	})
}

func TestPackageRunnersNameTheirPackage(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npm", "exec", "-y", "@scope/pkg@1.2.3"}, "@scope/pkg", true},
		{[]string{"npm", "--yes", "exec", "pkg"}, "pkg", true},
		{[]string{"npm", "x", "--", "pkg", "--arg"}, "pkg", true},
		{[]string{"npm", "exec", "--call", "pkg-bin"}, "", true},
		{[]string{"npm", "run", "start"}, "", false},
		{[]string{"bunx", "--bun", "pkg@latest"}, "pkg", true},
		{[]string{"bun", "x", "pkg"}, "pkg", true},
		{[]string{"pnpm", "dlx", "@scope/pkg"}, "@scope/pkg", true},
		{[]string{"pnpm", "--package=@scope/pkg", "dlx", "bin"}, "@scope/pkg", true},
		{[]string{"pnpm", "dlx", "-c", "echo hi"}, "", true},
		{[]string{"pnpx", "pkg@2"}, "pkg", true},
		{[]string{"yarn", "dlx", "-p", "pkg", "bin"}, "pkg", true},
		{[]string{"yarn", "dlx", "-q", "pkg@3"}, "pkg", true},
		{[]string{"node", "/home/u/.yarn/releases/yarn-4.1.0.cjs", "dlx", "pkg"}, "pkg", true},
		{[]string{"yarn", "start"}, "", false},
	})
}

func TestPathAndURLSpecsNameTheirLastElement(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npx", "-y", "./servers/weather"}, "weather", true},
		{[]string{"npx", "-y", "/opt/mcp/pkg-1.0.0.tgz"}, "pkg-1.0.0", true},
		{[]string{"npx", "-y", "git+https://github.com/acme/mcp-thing.git#main"}, "mcp-thing", true},
		{[]string{"npx", "-y", "github:acme/mcp-thing#v2"}, "mcp-thing", true},
		{[]string{"npx", "-y", "file:../local"}, "local", true},
		// A GitHub shorthand names its repository.
		{[]string{"npx", "-y", "acme/mcp-thing"}, "mcp-thing", true},
		{[]string{"npx", "-y", "acme/mcp-thing#v2"}, "mcp-thing", true},
		{[]string{"uvx", "--from", "git+https://github.com/acme/py-mcp@v1", "py-mcp"}, "py-mcp", true},
	})
}

func TestPythonRunnersNameThePackageOrModule(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"uvx", "mcp-server-fetch"}, "mcp-server-fetch", true},
		{[]string{"uvx", "mcp-server-git==0.6.2", "--repository", "/r"}, "mcp-server-git", true},
		{[]string{"uvx", "--python", "3.12", "mcp-server-time>=1.0"}, "mcp-server-time", true},
		{[]string{"uvx", "pkg[cli]@latest"}, "pkg", true},
		{[]string{"uvx", "--from", "mcp-tools[all]==2", "tool-a"}, "mcp-tools", true},
		{[]string{"uv", "tool", "run", "--with", "x", "mcp-server-fetch"}, "mcp-server-fetch", true},
		{[]string{"uv", "run", "--with", "mcp", "server.py"}, "server", true},
		{[]string{"uv", "--directory", "/srv/weather", "run", "weather.py"}, "weather", true},
		{[]string{"uv", "run", "--directory", "/srv/w", "mcp-weather", "--x"}, "mcp-weather", true},
		{[]string{"uv", "run", "-m", "mcp_server_time"}, "mcp_server_time", true},
		{[]string{"uv", "run", "python", "-m", "pkg.server"}, "pkg.server", true},
		{[]string{"uv", "sync"}, "", false},
		{[]string{"pipx", "run", "mcp-server-fetch==1"}, "mcp-server-fetch", true},
		{[]string{"pipx", "run", "--spec", "mcp-tools>=2", "tool-a"}, "mcp-tools", true},
		{[]string{"python3", "/usr/bin/pipx", "run", "pkg"}, "pkg", true},
		{[]string{"python3", "-m", "mcp_server_time", "--local-timezone", "UTC"}, "mcp_server_time", false},
		{[]string{"/usr/bin/python3.12", "-u", "-X", "utf8", "-m", "pkg.sub.server"}, "pkg.sub.server", false},
		{[]string{"python", "-um", "mod"}, "mod", false},
		{[]string{"python", "-mmod"}, "mod", false},
		{[]string{"python3", "-m", "pipx", "run", "pkg"}, "pkg", true},
		{[]string{"python3", "server.py"}, "", false},
		{[]string{"python3", "-c", "import x"}, "", false},
	})
}

func TestDockerRunNamesTheImageWithoutTagOrDigest(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"docker", "run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server:v1"}, "ghcr.io/github/github-mcp-server", true},
		{[]string{"docker", "run", "-it", "--rm", "mcp/fetch@sha256:" + strings.Repeat("0123456789abcdef", 4)}, "mcp/fetch", true},
		{[]string{"docker", "run", "-i", "-v", "/a:/b", "--name", "x", "--network=host", "host:5000/img:tag", "arg"}, "host:5000/img", true},
		{[]string{"docker", "run", "-itv", "/a:/b", "-eFOO=bar", "img"}, "img", true},
		{[]string{"docker", "--context", "remote", "container", "run", "--init", "-d", "img:1"}, "img", true},
		{[]string{"docker", "create", "img"}, "img", true},
		{[]string{"podman", "--remote", "run", "--interactive", "--tty", "--detach", "quay.io/a/b:2"}, "quay.io/a/b", true},
		{[]string{"docker", "compose", "-f", "c.yml", "run", "--rm", "-T", "github"}, "compose:github", true},
		{[]string{"docker-compose", "run", "-e", "A=b", "svc"}, "compose:svc", true},
		{[]string{"docker", "ps"}, "", false},
		{[]string{"docker", "compose", "up"}, "", false},
	})
}

func TestShellAndEnvNameWhatTheyRun(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"sh", "-c", "npx -y pkg"}, "pkg", true},
		{[]string{"/bin/bash", "-lc", "exec npx -y @scope/pkg@1 /tmp"}, "@scope/pkg", true},
		{[]string{"sh", "-c", "cd /srv && API_KEY=$KEY uvx mcp-server-fetch"}, "mcp-server-fetch", true},
		{[]string{"sh", "-c", "'mcp-server-filesystem' /tmp/d"}, "", true},
		{[]string{"sh", "-c", "mcp-server-filesystem /tmp/d"}, "", true},
		{[]string{"bash", "-o", "pipefail", "-c", "\"npx\" '-y' 'pkg'"}, "pkg", true},
		{[]string{"sh", "/opt/run.sh"}, "", false},
		{[]string{"env", "A=1", "-u", "B", "npx", "-y", "pkg"}, "pkg", true},
		{[]string{"env", "-S", "npx -y", "pkg"}, "pkg", true},
		{[]string{"env", "node", "/srv/server.js"}, "", true},
		{[]string{"cmd.exe", "/d", "/s", "/c", "\"npx -y pkg\""}, "pkg", true},
		{[]string{"cmd", "/C", "npx", "-y", "pkg"}, "pkg", true},
		{[]string{"mcptrace", "exec", "--session", "s1", "--", "uvx", "mcp-server-fetch"}, "mcp-server-fetch", true},
		{[]string{"mcptrace", "--config", "/c", "run", "--", "npx", "pkg"}, "pkg", true},
		{[]string{"mcptrace", "run", "npx", "pkg"}, "", false},
		{[]string{"mcptrace", "mark", "destroy"}, "", false},
		// Recursion is bounded: env env env env env npx names nothing.
		{[]string{"env", "env", "env", "env", "env", "npx", "pkg"}, "", true},
		{[]string{"env", "env", "env", "npx", "pkg"}, "pkg", true},
	})
}

func TestPlainProgramsAreNotWrappersAndNameNothing(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"mcp-server-filesystem", "/tmp"}, "", false},
		{[]string{"node", "/root/.npm/_npx/1234/node_modules/.bin/mcp-server-filesystem", "/tmp/d"}, "", false},
		{[]string{"node", "-e", "require('npx')"}, "", false},
		{[]string{"/usr/local/bin/github-mcp-server", "stdio"}, "", false},
		{[]string{"node", "host.mjs", "/tmp"}, "", false},
	})
	if name, wrapper := Identity(lineage.Image{}); name != "" || wrapper {
		t.Errorf("Identity of the zero image = %q, %v", name, wrapper)
	}
	if name, wrapper := Identity(lineage.Image{Filename: "/usr/bin/npx"}); name != "" || !wrapper {
		t.Errorf("Identity of npx without argv = %q, %v; want a wrapper naming nothing", name, wrapper)
	}
}

// A GitHub token shape, and a fake one that is not.
const ghToken = "ghp_0123456789abcdefghijABCDEFGHIJ012345"

func TestSecretLookingNamesAreRedacted(t *testing.T) {
	runIdentity(t, []identityCase{
		{[]string{"npx", "-y", ghToken}, redact.Marker, true},
		{[]string{"npx", "-y", "@scope/" + ghToken}, redact.Marker, true},
		{[]string{"docker", "run", "-i", "registry.example/" + ghToken + ":1"}, redact.Marker, true},
		{[]string{"uvx", "--from", "git+https://user:hunter2@git.example/x/repo.git", "repo"}, redact.Marker, true},
		// --token is no npx option: it may take the next element, so
		// nothing after it is a name.
		{[]string{"npx", "--token", "s3cr3tvalue", "pkg"}, "", true},
		{[]string{"python3", "-m", ghToken}, redact.Marker, false},
		// A secret elsewhere in the argv does not hide the package.
		{[]string{"npx", "-y", "pkg", "--api-key", "s3cr3tvalue"}, "pkg", true},
		{[]string{"sh", "-c", "GITHUB_TOKEN=" + ghToken + " npx -y pkg"}, "pkg", true},
		{[]string{"docker", "run", "-i", "-e", "GITHUB_TOKEN=" + ghToken, "img"}, "img", true},
		// ...unless the name contains it.
		{[]string{"npx", "-y", "pkg-s3cr3tvalue", "--api-key", "s3cr3tvalue"}, redact.Marker, true},
	})
}

func TestNamesAreBoundedAndInTheCharset(t *testing.T) {
	long := strings.Repeat("a", 300)
	if name := Name(proc(img("/opt/" + long))); name != long[:maxName] {
		t.Errorf("Name = %q (%d bytes), want %d bytes", name, len(name), maxName)
	}
	runIdentity(t, []identityCase{
		// A basename (uv run's fallback) is cut and kept in the charset...
		{[]string{"uv", "run", "/opt/" + long}, long[:maxName], true},
		{[]string{"uv", "run", "pkg with space$(x)"}, "pkg_with_space__x_", true},
		{[]string{"uv", "run", "ünï"}, "__n__", true},
		{[]string{"uv", "run", "日本"}, "", true},
		// ...a spec outside its grammar names nothing, and a package name
		// longer than a name is not cut into another one.
		{[]string{"npx", "-y", long}, "", true},
		{[]string{"npx", "-y", long[:maxName+1]}, "", true},
		{[]string{"npx", "-y", long[:maxName]}, long[:maxName], true},
		{[]string{"npx", "-y", "pkg with space$(x)"}, "", true},
		{[]string{"npx", "-y", "ünï"}, "", true},
		{[]string{"npx", "-y", "日本"}, "", true},
		{[]string{"npx", "-y", "./"}, "", true},
	})
}

func TestTruncatedLastArgumentNamesNothing(t *testing.T) {
	im := img("npx", "-y", "@modelcontextprotocol/server-files")
	im.ArgvTruncated = true
	if name, wrapper := Identity(im); name != "" || !wrapper {
		t.Errorf("Identity = %q, %v; want no name from a cut element", name, wrapper)
	}
	im = img("npx", "-y", "pkg", "/tmp/cut")
	im.ArgvTruncated = true
	if name, _ := Identity(im); name != "pkg" {
		t.Errorf("Identity = %q, want pkg", name)
	}
	im = img("sh", "-c", "npx -y pkg-cut")
	im.ArgvTruncated = true
	if name, _ := Identity(im); name != "" {
		t.Errorf("Identity = %q, want no name from a cut script", name)
	}
}

func TestNameFallsBackToPackageModuleOrBasename(t *testing.T) {
	for _, tc := range []struct {
		p    lineage.Process
		want string
	}{
		{proc(img("node", "/root/.npm/_npx/1/node_modules/@modelcontextprotocol/server-memory/dist/index.js")), "@modelcontextprotocol/server-memory"},
		{proc(img("node", "/app/node_modules/a/node_modules/b/cli.mjs")), "b"},
		{proc(img("node", "/root/.npm/_npx/1234/node_modules/.bin/mcp-server-filesystem", "/tmp/d")), "mcp-server-filesystem"},
		{proc(img("/usr/bin/env", "node", "/srv/weather/build/index.js")), "index"},
		{proc(img("python3", "-m", "mcp_server_time")), "mcp_server_time"},
		{proc(img("python3", "-u", "/srv/server.py", "--x")), "server"},
		{proc(img("/usr/local/bin/github-mcp-server", "stdio")), "github-mcp-server"},
		{proc(img(`C:\tools\srv.exe`, "--stdio")), "srv"},
		{proc(img("bash", "/opt/run.sh")), "run.sh"},
		{proc(img("/opt/" + ghToken)), redact.Marker},
		{lineage.Process{Comm: "worker"}, "worker"},
		// A fork that never executed: its inherited image, then the comm.
		{lineage.Process{Comm: "node", Images: []lineage.Image{{Argv: []string{"node", "host.mjs"}, Source: lineage.SourceInherited}}}, "host"},
		{lineage.Process{Comm: "x y", Images: []lineage.Image{{}}}, "x_y"},
	} {
		if got := Name(tc.p); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.p.Current().Argv, got, tc.want)
		}
	}
}

func proc(ims ...lineage.Image) lineage.Process {
	return lineage.Process{Images: ims}
}

func TestPackagedNeedsMoreThanABasename(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"node", "/home/u/.npm/_npx/1a/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/tmp"}, true},
		{[]string{"npx", "-y", "@modelcontextprotocol/server-github"}, true},
		{[]string{"python3", "-m", "mcp_server_fetch"}, true},
		{[]string{"node", "/home/u/project/server.js"}, false},
		{[]string{"/usr/local/bin/github-mcp-server", "stdio"}, false},
		{[]string{"sleep", "100"}, false},
	} {
		p := lineage.Process{Comm: "x", Images: []lineage.Image{{Filename: "/usr/bin/" + tc.argv[0], Argv: tc.argv}}}
		if got := Packaged(p); got != tc.want {
			t.Errorf("Packaged(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
}
