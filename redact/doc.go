// Package redact removes secrets from command lines before they reach logs,
// metrics, API answers or another user.
//
// Argv returns a redacted copy of an argv; String renders one for people
// (redacted, shell-quoted, shortened). Every secret value is replaced by
// Marker ("<redacted>"); the key that names it is kept so the line stays
// useful for forensics: "--token=<redacted>", "GITHUB_TOKEN=<redacted>",
// "-e", "API_KEY=<redacted>", "https://user:<redacted>@host".
//
// The rules are deliberately conservative: when a value might be a secret it
// is redacted, and harmless arguments ("ls -la /tmp",
// "--max-old-space-size=4096", "npm exec @scope/pkg /home/u/project") are
// left as they are.
//
//  1. Environment flags. The value after -e, --env, --build-arg or --setenv
//     (also --env=NAME=VALUE and -eNAME=VALUE) is an environment assignment:
//     NAME=VALUE keeps NAME and redacts VALUE whatever the name; a bare NAME
//     (passed through from the environment) is kept. A value starting with
//     "-" is another flag (sh -e -c), not an assignment.
//
//  2. Secret flags. A flag whose name contains token, secret, pass (password,
//     passwd, passphrase), key (apikey, api-key), auth (not author), credential,
//     bearer, cookie, private, session-id, signature or jwt, or has a
//     segment pw (--pw, -pw), case-insensitive (bypass, passthrough, compass
//     and keyboard do not count), has its value redacted: "--token X",
//     "--token=X", "-token X", "-Djavax.net.ssl.keyStorePassword=X". The
//     next argument is the value whatever it starts with ("--token --x7Q…"),
//     except "--" (the end of the options); a secret-named switch that takes
//     no value therefore hides the option after it, never a secret.
//     Exceptions: names starting with no-, show-, with-, ask-, use-,
//     enable-, disable-, skip-, allow-, prompt- and the name "private"
//     (switches: --no-auth, --show-secrets, gh --with-token), and names
//     ending in file, path, dir, -env, -name or -stdin, whose values are
//     references, not secrets. Single-letter flags are never enough by
//     themselves: -p is a port, -k curl's "insecure", sort's key field or
//     timeout's kill delay as often as a password. They count only for
//     the programs that take a secret there: mysql/mariadb and 7z -pVALUE;
//     sshpass -p; docker, podman, nerdctl, buildah, skopeo, helm, oras,
//     crane and regctl "login -p X"; mongo/mongosh -p; redis-cli -a;
//     openssl and mcrypt -k; ccrypt -K; zip/unzip -P; the OpenLDAP tools
//     -w; curl -u/--user/-U/--proxy-user user:VALUE.
//
//  3. Secret assignments. An argument NAME=VALUE whose NAME looks like a
//     secret by the words above, or has a segment PAT, SIG, DSN or PWD
//     (GITHUB_PAT, MYSQL_PWD, but not PATH or PWD), has VALUE redacted
//     (env FOO=bar keeps bar; env GITHUB_TOKEN=x does not). The same holds
//     for NAME=VALUE pairs inside an argument, separated by ? & ; , or #
//     (URL query strings, connection strings, --opt=a=1,password=x), and
//     for header-like arguments "Authorization: Bearer x",
//     "X-Api-Key: x", "Cookie: x".
//
//  4. URLs with a password: scheme://user:pass@host becomes
//     scheme://user:<redacted>@host.
//
//  5. Token shapes, anywhere in any argument, including program names and
//     kept keys: GitHub ghp_ gho_ ghu_ ghs_ ghr_ github_pat_, GitLab glpat-,
//     npm npm_, Hugging Face hf_, OpenAI/Anthropic sk- (sk-ant-, sk-proj-),
//     Stripe sk_live_/rk_live_/sk_test_, Slack xox?- and xapp-, Google AIza, AWS
//     AKIA/ASIA key ids, JWTs (eyJ….….…), "Bearer X" and PEM private key
//     blocks. The recognisable prefix is kept (ghp_<redacted>).
//
//  6. JSON. An argument that starts with { or [ (after a flag's "=" too:
//     --config={...}) is read as JSON, leniently: single quotes, bare keys
//     (JavaScript object literals), escaped quotes (JSON inside a shell
//     word) and text cut short are taken. The value of a key named like a
//     secret flag (apiKey, token, password, client_secret, …) is redacted
//     at any depth; under such a key or an env key (env, environment,
//     secrets …) every value of the object or array is, as with docker -e;
//     other string values are redacted as arguments on their own (URL
//     passwords, token shapes, nested JSON), and the strings of an array
//     as an argv ("args": ["--token", "x"]).
//
//  7. Scripts. The argument after -c (also -lc, -ec…, /c, /k, -Command,
//     --eval), and any argument containing white space, is split into shell
//     words (quotes respected, separators such as ; && | kept) and rules 1-6
//     apply to the words, so sh -c 'API_KEY=x exec node s.js' becomes
//     sh -c 'API_KEY=<redacted> exec node s.js'. Nested scripts are followed
//     a few levels deep; deeper than that the whole argument is redacted.
//
// Values that are only a variable reference ($TOKEN, "${TOKEN}") are not
// secrets and are kept. Empty values are kept empty.
package redact
