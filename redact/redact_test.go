package redact

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

const ghToken = "ghp_abcdefghijklmnopqrstuvwxyz0123456789" // ghp_ + 36

func TestArgvRedactsSecrets(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{
			name: "docker env value after -e",
			in:   []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN=" + ghToken, "ghcr.io/github/github-mcp-server"},
			want: []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN=<redacted>", "ghcr.io/github/github-mcp-server"},
		},
		{
			name: "any docker env value even with a harmless name",
			in:   []string{"docker", "run", "-e", "NODE_ENV=production", "img"},
			want: []string{"docker", "run", "-e", "NODE_ENV=<redacted>", "img"},
		},
		{
			name: "docker env pass-through name kept",
			in:   []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"},
			want: []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"},
		},
		{
			name: "env flag with equals",
			in:   []string{"podman", "run", "--env=SLACK_BOT_TOKEN=abc", "--env", "TEAM=x", "img"},
			want: []string{"podman", "run", "--env=SLACK_BOT_TOKEN=<redacted>", "--env", "TEAM=<redacted>", "img"},
		},
		{
			name: "env attached to -e",
			in:   []string{"docker", "run", "-eAPI_KEY=abc", "-eHOME", "img"},
			want: []string{"docker", "run", "-eAPI_KEY=<redacted>", "-eHOME", "img"},
		},
		{
			name: "docker build arg",
			in:   []string{"docker", "build", "--build-arg", "NPM_TOKEN=abc", "."},
			want: []string{"docker", "build", "--build-arg", "NPM_TOKEN=<redacted>", "."},
		},
		{
			name: "token flag with separate value",
			in:   []string{"uvx", "mcp-server-x", "--api-key", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"},
			want: []string{"uvx", "mcp-server-x", "--api-key", "<redacted>"},
		},
		{
			name: "token flag with equals",
			in:   []string{"node", "server.js", "--token=abc"},
			want: []string{"node", "server.js", "--token=<redacted>"},
		},
		{
			name: "single dash long flag",
			in:   []string{"./mcp", "-token", "abc", "-apikey=def"},
			want: []string{"./mcp", "-token", "<redacted>", "-apikey=<redacted>"},
		},
		{
			name: "flag names case insensitive",
			in:   []string{"x", "--Client-Secret", "abc", "--PASSWD=x", "--Auth", "y", "--cookie", "c=1", "--session-id", "s", "--private-key", "k", "--credentials", "c", "--bearer", "b"},
			want: []string{"x", "--Client-Secret", "<redacted>", "--PASSWD=<redacted>", "--Auth", "<redacted>", "--cookie", "<redacted>", "--session-id", "<redacted>", "--private-key", "<redacted>", "--credentials", "<redacted>", "--bearer", "<redacted>"},
		},
		{
			name: "secret flag value starting with a single dash",
			in:   []string{"x", "--token", "-Xb3kfj29"},
			want: []string{"x", "--token", "<redacted>"},
		},
		{
			name: "java system property password",
			in:   []string{"java", "-Djavax.net.ssl.keyStorePassword=changeit", "-jar", "x.jar"},
			want: []string{"java", "-Djavax.net.ssl.keyStorePassword=<redacted>", "-jar", "x.jar"},
		},
		{
			name: "secret assignment for env",
			in:   []string{"env", "FOO=bar", "GITHUB_PERSONAL_ACCESS_TOKEN=" + ghToken, "npx", "-y", "@modelcontextprotocol/server-github"},
			want: []string{"env", "FOO=bar", "GITHUB_PERSONAL_ACCESS_TOKEN=<redacted>", "npx", "-y", "@modelcontextprotocol/server-github"},
		},
		{
			name: "secret assignment names",
			in:   []string{"env", "AWS_SECRET_ACCESS_KEY=a", "DB_PASSWORD=b", "GH_PAT=c", "GOOGLE_APPLICATION_CREDENTIALS_JSON=d", "BASIC_AUTH_USER=e", "MYSQL_PWD=f", "SENTRY_DSN=g", "ANTHROPIC_API_KEY=h", "true"},
			want: []string{"env", "AWS_SECRET_ACCESS_KEY=<redacted>", "DB_PASSWORD=<redacted>", "GH_PAT=<redacted>", "GOOGLE_APPLICATION_CREDENTIALS_JSON=<redacted>", "BASIC_AUTH_USER=<redacted>", "MYSQL_PWD=<redacted>", "SENTRY_DSN=<redacted>", "ANTHROPIC_API_KEY=<redacted>", "true"},
		},
		{
			name: "secret assignment value with spaces redacted whole",
			in:   []string{"env", "PASSPHRASE=correct horse battery", "true"},
			want: []string{"env", "PASSPHRASE=<redacted>", "true"},
		},
		{
			name: "url password",
			in:   []string{"git", "clone", "https://x-access-token:abc@github.com/o/r"},
			want: []string{"git", "clone", "https://x-access-token:<redacted>@github.com/o/r"},
		},
		{
			name: "url password containing at sign",
			in:   []string{"psql", "postgres://user:p@ss@db:5432/x?sslmode=require"},
			want: []string{"psql", "postgres://user:<redacted>@db:5432/x?sslmode=require"},
		},
		{
			name: "url query parameters",
			in:   []string{"curl", "https://example.com/cb?code=1&access_token=abc&api_key=def&sig=ghi&q=go"},
			want: []string{"curl", "https://example.com/cb?code=1&access_token=<redacted>&api_key=<redacted>&sig=<redacted>&q=go"},
		},
		{
			name: "connection string pairs",
			in:   []string{"x", "--conn", "Server=h;User Id=u;Password=p;Database=d"},
			want: []string{"x", "--conn", "Server=h;User Id=u;Password=<redacted>;Database=d"},
		},
		{
			name: "pairs inside a flag value",
			in:   []string{"helm", "install", "--set", "db.password=x,replicas=2", "--opt=a=1,secret=y"},
			want: []string{"helm", "install", "--set", "db.password=<redacted>", "--opt=a=1,secret=<redacted>"},
		},
		{
			name: "authorization header",
			in:   []string{"curl", "-H", "Authorization: Bearer abc.def", "-H", "X-Api-Key: k", "-H", "Content-Type: application/json", "https://api"},
			want: []string{"curl", "-H", "Authorization: <redacted>", "-H", "X-Api-Key: <redacted>", "-H", "Content-Type: application/json", "https://api"},
		},
		{
			name: "bearer token anywhere",
			in:   []string{"x", "--header=Bearer abc", "Bearer%20def"},
			want: []string{"x", "--header=Bearer <redacted>", "Bearer%20<redacted>"},
		},
		{
			name: "github token shapes",
			in:   []string{"x", ghToken, "gho_abcdefghijklmnopqrstuv", "ghu_abcdefghijklmnopqrstuv", "ghs_abcdefghijklmnopqrstuv", "ghr_abcdefghijklmnopqrstuv", "github_pat_11ABCDEFG0123456789_abcdefghijkl"},
			want: []string{"x", "ghp_<redacted>", "gho_<redacted>", "ghu_<redacted>", "ghs_<redacted>", "ghr_<redacted>", "github_pat_<redacted>"},
		},
		{
			name: "token shape inside an argument",
			in:   []string{"git", "remote", "add", "o", "https://" + ghToken + "@github.com/o/r.git"},
			want: []string{"git", "remote", "add", "o", "https://ghp_<redacted>@github.com/o/r.git"},
		},
		{
			name: "vendor token shapes",
			in:   []string{"x", "sk-proj-abcdefghijklmnopqrstuvwx", "sk-ant-api03-abcdefghijklmnopqrst", "xoxb-1234567890-abcdef", "AKIAIOSFODNN7EXAMPLE", "glpat-abcdefghijklmnopqrst", "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345"},
			want: []string{"x", "sk-<redacted>", "sk-<redacted>", "xoxb-<redacted>", "AKIA<redacted>", "glpat-<redacted>", "AIza<redacted>"},
		},
		{
			name: "jwt",
			in:   []string{"x", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"},
			want: []string{"x", "eyJ<redacted>"},
		},
		{
			name: "token shape in a kept name",
			in:   []string{"docker", "run", "-e", ghToken, "img"},
			want: []string{"docker", "run", "-e", "ghp_<redacted>", "img"},
		},
		{
			name: "assignment inside sh -c",
			in:   []string{"sh", "-c", "API_KEY=x exec node s.js"},
			want: []string{"sh", "-c", "API_KEY=<redacted> exec node s.js"},
		},
		{
			name: "flags and headers inside bash -lc",
			in:   []string{"bash", "-lc", "export GITHUB_TOKEN=abc; node s.js --password 'hunter 2' && curl -H 'Authorization: Bearer abc' https://u:p@h/x?token=1&a=2"},
			want: []string{"bash", "-lc", "export GITHUB_TOKEN=<redacted>; node s.js --password <redacted> && curl -H 'Authorization: <redacted>' https://u:<redacted>@h/x?token=<redacted>&a=2"},
		},
		{
			name: "unquoted authorization header words in a script",
			in:   []string{"sh", "-c", "wget --header=Authorization: Bearer abc url"},
			want: []string{"sh", "-c", "wget --header=Authorization: Bearer <redacted> url"},
		},
		{
			name: "nested scripts",
			in:   []string{"sh", "-c", `bash -c "TOKEN=abc node s.js"`},
			want: []string{"sh", "-c", `bash -c "TOKEN=<redacted> node s.js"`},
		},
		{
			name: "docker -e inside a script",
			in:   []string{"sh", "-c", "docker run -i --rm -e GITHUB_TOKEN=abc -e DEBUG img"},
			want: []string{"sh", "-c", "docker run -i --rm -e GITHUB_TOKEN=<redacted> -e DEBUG img"},
		},
		{
			name: "cmd /c script",
			in:   []string{"cmd", "/c", "set TOKEN=abc && node s.js"},
			want: []string{"cmd", "/c", "set TOKEN=<redacted> && node s.js"},
		},
		{
			name: "script cut short by the kernel",
			in:   []string{"sh", "-c", "echo 'unterminated TOKEN=abc"},
			want: []string{"sh", "-c", "echo 'unterminated TOKEN=<redacted>"},
		},
		{
			name: "node eval",
			in:   []string{"node", "-e", "fetch(u, {headers: {Authorization: 'Bearer abc'}})"},
			want: []string{"node", "-e", "fetch(u, {headers: {Authorization: 'Bearer <redacted>'}})"},
		},
		{
			name: "mysql attached password",
			in:   []string{"mysql", "-uroot", "-phunter2", "-p", "db"},
			want: []string{"mysql", "-uroot", "-p<redacted>", "-p", "db"},
		},
		{
			name: "sshpass and redis-cli passwords",
			in:   []string{"sh", "-c", "sshpass -p pw ssh h; redis-cli -a pw2 ping"},
			want: []string{"sh", "-c", "sshpass -p <redacted> ssh h; redis-cli -a <redacted> ping"},
		},
		{
			name: "curl user password",
			in:   []string{"/usr/bin/curl", "-u", "admin:s3cret", "--user=a:b", "-Uproxy:pw", "https://h"},
			want: []string{"/usr/bin/curl", "-u", "admin:<redacted>", "--user=a:<redacted>", "-Uproxy:<redacted>", "https://h"},
		},
		{
			name: "json config argument",
			in:   []string{"npx", "-y", "@example/mcp-server", "--config", `{"apiKey":"k-123","baseUrl":"https://api.example.com","timeout":30}`},
			want: []string{"npx", "-y", "@example/mcp-server", "--config", `{"apiKey":"<redacted>","baseUrl":"https://api.example.com","timeout":30}`},
		},
		{
			name: "json after a flag's equals sign",
			in:   []string{"node", "s.js", `--config={"client_secret": "abc", "password": 12345, "debug": true}`},
			want: []string{"node", "s.js", `--config={"client_secret": "<redacted>", "password": <redacted>, "debug": true}`},
		},
		{
			name: "nested json",
			in:   []string{"x", `{"server":{"auth":{"user":"u","pass":"p"}},"db":{"url":"postgres://app:pw@db/app","credentials":["a","b"]}}`},
			want: []string{"x", `{"server":{"auth":{"user":"<redacted>","pass":"<redacted>"}},"db":{"url":"postgres://app:<redacted>@db/app","credentials":["<redacted>","<redacted>"]}}`},
		},
		{
			name: "env-style json redacts every value",
			in:   []string{"x", "--mcp", `{"command":"npx","args":["-y","@modelcontextprotocol/server-github"],"env":{"GITHUB_PERSONAL_ACCESS_TOKEN":"abc","LOG_LEVEL":"debug"}}`},
			want: []string{"x", "--mcp", `{"command":"npx","args":["-y","@modelcontextprotocol/server-github"],"env":{"GITHUB_PERSONAL_ACCESS_TOKEN":"<redacted>","LOG_LEVEL":"<redacted>"}}`},
		},
		{
			name: "json args array read as an argv",
			in:   []string{"x", `{"command":"uvx","args":["mcp-server-x","--api-key","abc","-e","TOKEN=def"]}`},
			want: []string{"x", `{"command":"uvx","args":["mcp-server-x","--api-key","<redacted>","-e","TOKEN=<redacted>"]}`},
		},
		{
			name: "json in a script with single quotes",
			in:   []string{"sh", "-c", `exec node s.js --config '{"apiKey": "abc"}'`},
			want: []string{"sh", "-c", `exec node s.js --config '{"apiKey": "<redacted>"}'`},
		},
		{
			name: "json with escaped quotes in a script",
			in:   []string{"sh", "-c", `exec node s.js --config "{\"apiKey\":\"abc\",\"n\":\"a\\\"b\"}"`},
			want: []string{"sh", "-c", `exec node s.js --config "{\"apiKey\":\"<redacted>\",\"n\":\"a\\\"b\"}"`},
		},
		{
			name: "javascript object literal",
			in:   []string{"x", `{apiKey: 'abc', region: 'eu'}`},
			want: []string{"x", `{apiKey: '<redacted>', region: 'eu'}`},
		},
		{
			name: "json cut short by the kernel",
			in:   []string{"x", `{"env":{"A":"1"},"token":"abcdef`},
			want: []string{"x", `{"env":{"A":"<redacted>"},"token":"<redacted>`},
		},
		{
			name: "docker login password",
			in:   []string{"docker", "login", "-u", "me", "-p", "hunter2", "registry.example.com"},
			want: []string{"docker", "login", "-u", "me", "-p", "<redacted>", "registry.example.com"},
		},
		{
			name: "podman login attached password and helm registry login",
			in:   []string{"sh", "-c", "podman login -phunter2 r.io; helm registry login r.io -p pw2 -u me"},
			want: []string{"sh", "-c", "podman login -p<redacted> r.io; helm registry login r.io -p <redacted> -u me"},
		},
		{
			name: "pw flags",
			in:   []string{"x", "--pw", "hunter2", "--db-pw=x", "-pw", "y"},
			want: []string{"x", "--pw", "<redacted>", "--db-pw=<redacted>", "-pw", "<redacted>"},
		},
		{
			name: "single-letter password flags of known programs",
			in:   []string{"sh", "-c", "openssl enc -aes256 -k pw1 -in f; ldapsearch -x -D cn=admin -w pw2 -b dc=x; zip -P pw3 a.zip f; mongosh -u admin -p pw4; mcrypt -k pw5 f; 7z a -ppw6 a.7z f"},
			want: []string{"sh", "-c", "openssl enc -aes256 -k <redacted> -in f; ldapsearch -x -D cn=admin -w <redacted> -b dc=x; zip -P <redacted> a.zip f; mongosh -u admin -p <redacted>; mcrypt -k <redacted> f; 7z a -p<redacted> a.7z f"},
		},
		{
			name: "secret value starting with two dashes",
			in:   []string{"x", "--token", "--x7QpL2mZ9vR4tY8w", "--api-key", "--abc", "--verbose"},
			want: []string{"x", "--token", "<redacted>", "--api-key", "<redacted>", "--verbose"},
		},
		{
			name: "github tokens in mcp server configs",
			in:   []string{"docker", "run", "--env", "GITHUB_PERSONAL_ACCESS_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijkl", "img", "--gh-host", "https://" + ghToken + "@github.com", "gho_16C7e42F292c6912E7710c838347Ae178B4a"},
			want: []string{"docker", "run", "--env", "GITHUB_PERSONAL_ACCESS_TOKEN=<redacted>", "img", "--gh-host", "https://ghp_<redacted>@github.com", "gho_<redacted>"},
		},
		{
			name: "slack tokens",
			in:   []string{"npx", "-y", "@modelcontextprotocol/server-slack", "xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxp-1234-5678-9012-abcdef0123", "xapp-1-A0123456789-0123456789-abcdef"},
			want: []string{"npx", "-y", "@modelcontextprotocol/server-slack", "xoxb-<redacted>", "xoxp-<redacted>", "xapp-<redacted>"},
		},
		{
			name: "database urls with passwords",
			in:   []string{"npx", "-y", "@modelcontextprotocol/server-postgres", "postgresql://mcp:s3cr3t@db.internal:5432/app", "mysql://root:pw@127.0.0.1:3306/x", "mongodb+srv://u:p@cluster0.x.mongodb.net/db", "redis://:pw@cache:6379/0"},
			want: []string{"npx", "-y", "@modelcontextprotocol/server-postgres", "postgresql://mcp:<redacted>@db.internal:5432/app", "mysql://root:<redacted>@127.0.0.1:3306/x", "mongodb+srv://u:<redacted>@cluster0.x.mongodb.net/db", "redis://:<redacted>@cache:6379/0"},
		},
		{
			name: "bearer headers in --header",
			in:   []string{"npx", "mcp-remote", "https://mcp.example.com/sse", "--header", "Authorization: Bearer abc.def-ghi", "--header=Authorization:Bearer xyz", "--header", "X-API-Key: k1"},
			want: []string{"npx", "mcp-remote", "https://mcp.example.com/sse", "--header", "Authorization: <redacted>", "--header=Authorization:<redacted>", "--header", "X-API-Key: <redacted>"},
		},
		{
			name: "pem private key",
			in:   []string{"x", "--cert", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"},
			want: []string{"x", "--cert", "-----BEGIN RSA PRIVATE KEY-----<redacted>-----END RSA PRIVATE KEY-----"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Argv(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Argv(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestArgvKeepsHarmlessArguments(t *testing.T) {
	tests := []struct {
		name string
		in   []string
	}{
		{"ls", []string{"ls", "-la", "/tmp"}},
		{"npm exec", []string{"npm", "exec", "--yes", "--", "@modelcontextprotocol/server-filesystem", "/home/u/project"}},
		{"node flags", []string{"node", "--max-old-space-size=4096", "--enable-source-maps", "/home/u/.npm/_npx/1f2e/node_modules/.bin/mcp-server-github"}},
		{"python module", []string{"python", "-m", "http.server", "8080"}},
		{"uvx", []string{"uvx", "--from", "git+https://github.com/o/r@v1.2", "mcp-server-fetch"}},
		{"docker run", []string{"docker", "run", "-i", "--rm", "--network=host", "-p", "8080:80", "-v", "/home/u:/work", "--env-file", "/etc/x.env", "mcp/fetch"}},
		{"sh -e -c", []string{"sh", "-e", "-c", "cd /srv && exec node index.js --port 3000"}},
		{"env harmless", []string{"env", "NODE_ENV=production", "PATH=/usr/bin", "PWD=/home/u", "node", "s.js"}},
		{"url without password", []string{"git", "clone", "ssh://git@github.com/o/r", "https://github.com/o/r?tab=readme"}},
		{"boolean no- flag", []string{"x", "--no-auth", "serve"}},
		{"file flags", []string{"x", "--password-file", "/run/secrets/pw", "--token-path=/var/run/t", "--key-dir", "/etc/keys"}},
		{"variable references", []string{"sh", "-c", `exec server --token "$GITHUB_TOKEN" --api-key=${API_KEY}`}},
		{"author", []string{"git", "commit", "--author=A <a@b>", "-m", "fix token refresh"}},
		{"bypass", []string{"codex", "--dangerously-bypass-approvals-and-sandbox", "fix it"}},
		{"claude", []string{"claude", "--permission-mode", "acceptEdits", "--mcp-config", "/home/u/.mcp.json"}},
		{"single dash long non-env", []string{"x", "-encoding=utf8", "-exec", "y"}},
		{"curl insecure", []string{"curl", "-k", "https://localhost:8443/health"}},
		{"sort key and timeout kill delay", []string{"sh", "-c", "sort -k 2 f | head; timeout -k 5 10 node s.js"}},
		{"docker run publish", []string{"docker", "run", "-p", "8080:80", "img"}},
		{"docker login password from stdin", []string{"docker", "login", "--password-stdin", "-u", "me", "r.io"}},
		{"secret-named switches", []string{"gh", "repo", "create", "x", "--private", "--clone"}},
		{"show secrets switch", []string{"mcptrace", "tree", "--show-secrets", "--width", "80"}},
		{"harmless json", []string{"x", "--config", `{"port":3000,"root":"/srv","tools":["read","write"],"debug":false}`}},
		{"test brackets in a script", []string{"sh", "-c", "[ -f x ] && exec node s.js"}},
		{"empty", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Argv(tt.in); !slices.Equal(got, tt.in) {
				t.Errorf("Argv(%q)\n got %q\nwant it unchanged", tt.in, got)
			}
		})
	}
}

func TestArgvLeavesInputAlone(t *testing.T) {
	in := []string{"node", "--token=abc"}
	out := Argv(in)
	if in[1] != "--token=abc" {
		t.Errorf("input modified: %q", in)
	}
	out[0] = "x"
	if in[0] != "node" {
		t.Errorf("output shares the input's array")
	}
	if Argv(nil) != nil {
		t.Errorf("Argv(nil) != nil")
	}
}

func TestArgvRedactsTooDeeplyNestedScripts(t *testing.T) {
	s := "TOKEN=abc"
	for range maxDepth + 2 {
		s = "sh -c " + strings.ReplaceAll(strings.ReplaceAll(`'`+s+`'`, `\`, `\\`), `'`, `"`)
	}
	got := Argv([]string{"sh", "-c", s})
	if strings.Contains(got[2], "abc") {
		t.Errorf("secret survived deep nesting: %q", got[2])
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		max  int
		want string
	}{
		{"plain words", []string{"ls", "-la", "/tmp"}, 0, "ls -la /tmp"},
		{"redacted and quoted", []string{"sh", "-c", "API_KEY=x exec node s.js"}, 0, "sh -c 'API_KEY=<redacted> exec node s.js'"},
		{"marker needs no quotes", []string{"node", "s.js", "--token", "abc"}, 0, "node s.js --token <redacted>"},
		{"empty argument", []string{"x", ""}, 0, "x ''"},
		{"single quote inside", []string{"echo", "it's"}, 0, `echo "it's"`},
		{"single and double quotes", []string{"echo", `it's "x"`}, 0, `echo 'it'\''s "x"'`},
		{"shell metacharacters", []string{"echo", "$HOME", "a*b", "x;y"}, 0, "echo '$HOME' 'a*b' 'x;y'"},
		{"unicode letters unquoted", []string{"cat", "/home/josé/日記"}, 0, "cat /home/josé/日記"},
		{"control characters escaped", []string{"x", "\x1b[2Jhi\n"}, 0, `x $'\x1b[2Jhi\n'`},
		{"bidi override escaped", []string{"x", "a\u202eb"}, 0, `x $'a\u202eb'`},
		{"invalid utf-8 escaped", []string{"x", "a\xffb"}, 0, `x $'a\xffb'`},
		{"shortened", []string{"node", "/srv/app/server.js", "--port", "3000"}, 12, "node /srv/a…"},
		{"fits exactly", []string{"ls", "-la"}, 6, "ls -la"},
		{"max one", []string{"ls", "-la"}, 1, "…"},
		{"not cut through a marker", []string{"x", "--token", "abc"}, 16, "x --token …"},
		{"shortened by runes", []string{"echo", "日本語日本語"}, 8, "echo 日本…"},
		{"no argv", nil, 10, ""},
		{"middle of a long path elided", []string{"node", "/home/u/.npm/_npx/3dfbf5d9eed8e8d5/node_modules/.bin/mcp-server-github", "--toolsets", "repos"}, 60, "node /home/u/.npm/_npx/…/mcp-server-github --toolsets repos"},
		{"only as much as needed", []string{"node", "/home/u/.npm/_npx/3dfbf5d9eed8e8d5/node_modules/.bin/mcp-server-github"}, 72, "node /home/u/.npm/_npx/3dfbf5d9eed8e8d5/node_modules/…/mcp-server-github"},
		{"paths then the end", []string{"/home/u/.cache/uv/archive-v0/Xa1/bin/python", "/home/u/.cache/uv/archive-v0/Xa1/bin/mcp-server-fetch", "--a", "b"}, 30, "/home/…/python /home/u/.cache…"},
		{"no path elision without need", []string{"/a/b/c/d"}, 0, "/a/b/c/d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in, tt.max); got != tt.want {
				t.Errorf("String(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func FuzzArgv(f *testing.F) {
	f.Add("docker\x00run\x00-e\x00GITHUB_TOKEN=", uint16(5), uint16(13))
	f.Add("sh\x00-c\x00TOKEN='abc def' node \"x y\"", uint16(2), uint16(7))
	f.Add("curl\x00-H\x00Authorization: Bearer ", uint16(2), uint16(22))
	f.Add("x\x00--token\x00", uint16(2), uint16(0))
	f.Add("", uint16(0), uint16(0))
	f.Add("x\x00--config\x00{\"env\":{\"A\":\"1\"},\"args\":[\"--token\",\"", uint16(2), uint16(30))
	f.Add("sh\x00-c\x00node s --config \"{\\\"apiKey\\\":\\\"", uint16(2), uint16(40))
	f.Add("docker\x00login\x00-p\x00", uint16(3), uint16(0))
	f.Fuzz(func(t *testing.T, joined string, at, off uint16) {
		argv := strings.Split(joined, "\x00")
		_ = Argv(argv) // must not panic on anything
		_ = String(argv, int(off%100))

		// Plant a GitHub token somewhere; it must never come out.
		i := int(at) % len(argv)
		j := int(off) % (len(argv[i]) + 1)
		argv[i] = argv[i][:j] + ghToken + argv[i][j:]
		for k, a := range Argv(argv) {
			if strings.Contains(a, ghToken) {
				t.Fatalf("token survived Argv(%q)[%d] = %q", argv, k, a)
			}
		}
		for _, max := range []int{0, 20, 200} {
			s := String(argv, max)
			if strings.Contains(s, ghToken) {
				t.Fatalf("token survived String(%q, %d) = %q", argv, max, s)
			}
			if n := utf8.RuneCountInString(s); max > 0 && n > max {
				t.Fatalf("String(%q, %d) has %d runes", argv, max, n)
			}
		}
	})
}
