package debian

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHostMirror(t *testing.T) {
	etc := t.TempDir()
	d := filepath.Join(etc, "sources.list.d")
	os.MkdirAll(d, 0o755)
	keyring := filepath.Join(etc, "k.gpg")
	os.WriteFile(keyring, []byte("x"), 0o644)
	os.WriteFile(filepath.Join(d, "a-nodesource.list"), []byte("deb [signed-by=/x.gpg] https://deb.example.com/node_20.x nodistro main\n"), 0o644)
	os.WriteFile(filepath.Join(d, "debian.sources"), []byte(`Types: deb
# comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: `+keyring+`

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: `+keyring+`
`), 0o644)
	t.Setenv("MCPTRACE_VM_MIRROR", "")
	t.Setenv("MCPTRACE_VM_SECURITY_MIRROR", "")
	t.Setenv("MCPTRACE_VM_KEYRING", "")
	m, err := hostMirror(etc)
	if err != nil {
		t.Fatal(err)
	}
	if m.URI != "http://mirror.example/debian" || m.SecurityURI != "http://mirror.example/debian-security" || m.Keyring != keyring {
		t.Errorf("hostMirror = %+v", m)
	}

	// One-line format, no security entry: derived from the archive URL.
	etc2 := t.TempDir()
	os.WriteFile(filepath.Join(etc2, "sources.list"), []byte("deb [arch=amd64 signed-by="+keyring+"] http://m2.example/debian bullseye main\n"), 0o644)
	m, err = hostMirror(etc2)
	if err != nil {
		t.Fatal(err)
	}
	if m.URI != "http://m2.example/debian" || m.SecurityURI != "http://m2.example/debian-security" || m.Keyring != keyring {
		t.Errorf("hostMirror = %+v", m)
	}

	if _, err := hostMirror(t.TempDir()); err == nil {
		t.Error("no sources: want an error")
	}
}
