package containers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEngine is an HTTP server on a unix socket that answers as handler
// says and records the requests' paths.
type fakeEngine struct {
	socket string
	mu     sync.Mutex
	paths  []string
}

func newFakeEngine(t *testing.T, handler http.HandlerFunc) *fakeEngine {
	t.Helper()
	// t.TempDir's path can pass the 108 bytes of a socket address.
	dir, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeEngine{socket: filepath.Join(dir, "docker.sock")}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
		f.mu.Unlock()
		handler(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return f
}

func (f *fakeEngine) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

// versionHandler answers GET /version with an engine speaking API
// minAPI..maxAPI, and refuses other versions as dockerd does; rest
// answers the rest.
func versionHandler(maxAPI, minAPI string, rest http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			fmt.Fprintf(w, `{"Version":"fake","ApiVersion":%q,"MinAPIVersion":%q,"Os":"linux","Arch":"amd64"}`, maxAPI, minAPI)
			return
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v"), "/")
		got, ok := parseAPIVersion(v)
		lo, _ := parseAPIVersion(minAPI)
		hi, _ := parseAPIVersion(maxAPI)
		switch {
		case !ok:
			http.Error(w, `{"message":"page not found"}`, http.StatusNotFound)
		case got.less(lo):
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"message":"client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version"}`, v, minAPI)
		case hi.less(got):
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"message":"client version %s is too new. Maximum supported API version is %s"}`, v, maxAPI)
		default:
			rest(w, r)
		}
	}
}

func inspectAnswer(id string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"Id":%q,"Name":"/x","Created":"2026-11-26T07:35:52.618525185Z","Image":"sha256:00","State":{"Running":true,"Pid":42,"StartedAt":"2026-11-26T07:35:52.77274215Z"},"Config":{"Image":"busybox:1"}}`, id)
	}
}

func TestNegotiateSpeaksTheNewestVersionBothKnow(t *testing.T) {
	for _, tc := range []struct {
		name, serverMax, serverMin string
		want                       string // "" for an error
		wantErr                    string
	}{
		{name: "docker 20.10", serverMax: "1.41", serverMin: "1.12", want: "1.41"},
		{name: "docker 24", serverMax: "1.43", serverMin: "1.12", want: "1.43"},
		{name: "docker 28", serverMax: "1.49", serverMin: "1.24", want: "1.44"},
		{name: "docker 29 accepts nothing older than 1.44", serverMax: "1.52", serverMin: "1.44", want: "1.44"},
		{name: "our oldest", serverMax: "1.24", serverMin: "1.12", want: "1.24"},
		{name: "minor versions compare as numbers", serverMax: "1.100", serverMin: "1.9", want: "1.44"},
		{name: "no minimum said", serverMax: "1.41", want: "1.41"},
		{name: "engine too old", serverMax: "1.23", serverMin: "1.12", wantErr: "engine speaks API 1.23 at most, older than 1.24 (Docker 1.12), the oldest this client speaks: upgrade the engine"},
		{name: "engine too new", serverMax: "1.60", serverMin: "1.45", wantErr: "engine accepts API 1.45 and newer only, and this client speaks up to 1.44: upgrade mcptrace"},
		{name: "not a version", serverMax: "v1.41", wantErr: `engine reports API version "v1.41", not MAJOR.MINOR`},
		{name: "empty", serverMax: "", wantErr: `engine reports API version "", not MAJOR.MINOR`},
		{name: "bad minimum", serverMax: "1.41", serverMin: "x", wantErr: `engine reports minimum API version "x", not MAJOR.MINOR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := negotiate(tc.serverMax, tc.serverMin)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("negotiate = %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("negotiate = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCallsUseTheNegotiatedVersion(t *testing.T) {
	f := newFakeEngine(t, versionHandler("1.41", "1.12", inspectAnswer(testID)))
	e := NewEngine("unix://" + f.socket)
	if e.Socket() != f.socket {
		t.Errorf("Socket() = %s, want %s", e.Socket(), f.socket)
	}
	if len(f.requests()) != 0 {
		t.Fatalf("NewEngine did I/O: %v", f.requests())
	}
	// The first call negotiates.
	if _, err := e.Inspect(context.Background(), testID); err != nil {
		t.Fatal(err)
	}
	v, err := e.Negotiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v != (Version{Engine: "fake", APIVersion: "1.41", MinAPIVersion: "1.12", OS: "linux", Arch: "amd64", Using: "1.41"}) {
		t.Errorf("Version %+v", v)
	}
	want := []string{"GET /version", "GET /v1.41/containers/" + testID + "/json", "GET /version"}
	if got := f.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEngineUpgradedUnderTheClientIsNegotiatedWithAgain(t *testing.T) {
	var mu sync.Mutex
	upgraded := false
	f := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		up := upgraded
		mu.Unlock()
		if up {
			versionHandler("1.52", "1.44", inspectAnswer(testID))(w, r)
		} else {
			versionHandler("1.41", "1.12", inspectAnswer(testID))(w, r)
		}
	})
	e := NewEngine(f.socket)
	if _, err := e.Inspect(context.Background(), testID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	upgraded = true
	mu.Unlock()
	if _, err := e.Inspect(context.Background(), testID); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	got := f.requests()
	if last := got[len(got)-1]; last != "GET /v1.44/containers/"+testID+"/json" {
		t.Errorf("requests %v", got)
	}
}

// Stop and Kill take full IDs only; Inspect also a name or an ID prefix
// (what `docker start NAME` sends), and nothing that could leave its
// path segment.
func TestIDsThatAreNotFullIDsNeverReachTheEngine(t *testing.T) {
	f := newFakeEngine(t, versionHandler("1.41", "1.12", inspectAnswer(testID)))
	e := NewEngine(f.socket)
	ctx := context.Background()
	for _, id := range []string{"", testShort, strings.ToUpper(testID), "../../v1.41/containers/create", testID + "/../../x", "%2e%2e", "svc?x=1", ".svc"} {
		if _, err := e.Inspect(ctx, id); ValidRef(id) != (err == nil) || err != nil && !strings.Contains(err.Error(), "names no container") {
			t.Errorf("Inspect(%q) = %v", id, err)
		}
		if err := e.Stop(ctx, id, time.Second); err == nil {
			t.Errorf("Stop(%q) = nil", id)
		}
		if err := e.Kill(ctx, id, "KILL"); err == nil {
			t.Errorf("Kill(%q) = nil", id)
		}
	}
	for _, sig := range []string{"", "KILL&t=1", "kill", "SIGKILL/../x", strings.Repeat("A", 17)} {
		if err := e.Kill(ctx, testID, sig); err == nil || !strings.Contains(err.Error(), "is not a signal") {
			t.Errorf("Kill(signal %q) = %v", sig, err)
		}
	}
	want := []string{"GET /version", "GET /v1.41/containers/" + testShort + "/json", "GET /v1.41/containers/" + strings.ToUpper(testID) + "/json"}
	if got := f.requests(); !slices.Equal(got, want) {
		t.Errorf("requests reached the engine: %v, want only the inspections of a short ID and a name: %v", got, want)
	}
	// A full ID must be what the engine answers about; a name or prefix
	// is whatever the engine resolves it to now.
	if c, err := e.Inspect(ctx, testShort); err != nil || c.ID != testID {
		t.Errorf("Inspect(%q) = %+v, %v; want %s", testShort, c, err, testID)
	}
}

func TestStatusesOfStopAndKillMeanWhatTheyDocument(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		message string
		stop    string // "nil", "notfound" or "error"
		kill    string
	}{
		{"done", http.StatusNoContent, "", "nil", "nil"},
		{"already stopped", http.StatusNotModified, "", "nil", "error"},
		{"not running", http.StatusConflict, "Cannot kill container: " + testID + ": Container " + testID + " is not running", "error", "nil"},
		{"other conflict", http.StatusConflict, "Container " + testID + " is paused. Unpause the container before stopping or killing", "error", "error"},
		{"gone", http.StatusNotFound, "No such container: " + testID, "notfound", "notfound"},
		{"engine failure", http.StatusInternalServerError, "something broke", "error", "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t, versionHandler("1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				if tc.message != "" {
					fmt.Fprintf(w, `{"message":%q}`, tc.message)
				}
			}))
			e := NewEngine(f.socket)
			check := func(what, want string, err error) {
				t.Helper()
				switch want {
				case "nil":
					if err != nil {
						t.Errorf("%s: %v, want nil", what, err)
					}
				case "notfound":
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("%s: %v, want ErrNotFound", what, err)
					}
				default:
					if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnreachable) {
						t.Errorf("%s: %v, want another error", what, err)
					}
				}
			}
			check("Stop", tc.stop, e.Stop(context.Background(), testID, time.Second))
			check("Kill", tc.kill, e.Kill(context.Background(), testID, "KILL"))
			if tc.status == http.StatusNotFound {
				_, err := e.Inspect(context.Background(), testID)
				check("Inspect", "notfound", err)
				want := "container engine at " + f.socket + ": inspect " + testShort + ": no such container"
				if err.Error() != want {
					t.Errorf("Inspect error %q, want %q", err, want)
				}
			}
		})
	}
}

func TestStopSendsItsGraceInWholeSecondsRoundedUp(t *testing.T) {
	f := newFakeEngine(t, versionHandler("1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	e := NewEngine(f.socket)
	for _, grace := range []time.Duration{0, -time.Second, time.Millisecond, time.Second, 1500 * time.Millisecond} {
		if err := e.Stop(context.Background(), testID, grace); err != nil {
			t.Fatal(err)
		}
	}
	got := f.requests()[1:] // after GET /version
	want := []string{"0", "0", "1", "1", "2"}
	for i, w := range want {
		if got[i] != "POST /v1.41/containers/"+testID+"/stop?t="+w {
			t.Errorf("request %d: %s, want t=%s", i, got[i], w)
		}
	}
}

func TestStopWaitsLongerThanItsGrace(t *testing.T) {
	f := newFakeEngine(t, versionHandler("1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1200 * time.Millisecond) // the container ignored its stop signal
		w.WriteHeader(http.StatusNoContent)
	}))
	e := NewEngine(f.socket)
	e.Timeout = 500 * time.Millisecond
	if _, err := e.Negotiate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(context.Background(), testID, time.Second); err != nil {
		t.Errorf("Stop with a 1s grace, answered after 1.2s: %v", err)
	}
	// Inspect has no grace: the same wait is too long.
	start := time.Now()
	_, err := e.Inspect(context.Background(), testID)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("Inspect answered after 1.2s with a 0.5s timeout: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Inspect returned after %v, its bound is 0.5s", d)
	}
}

func TestUnreachableEngineErrorSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "docker.sock")
	refused := filepath.Join(dir, "r.sock")
	l, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens
	for _, tc := range []struct{ socket, want string }{
		{missing, "container engine at " + missing + ": connect: no such file or directory (is dockerd running? set containers.engine-socket)"},
		{refused, "container engine at " + refused + ": connect: connection refused (is dockerd running? set containers.engine-socket)"},
	} {
		start := time.Now()
		_, err := NewEngine(tc.socket).Negotiate(context.Background())
		if err == nil || err.Error() != tc.want {
			t.Errorf("Negotiate: %v\nwant %s", err, tc.want)
		}
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("%v is not ErrUnreachable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the error took %v", d)
		}
		// Every call says the same.
		if err := NewEngine(tc.socket).Stop(context.Background(), testID, time.Second); err == nil || err.Error() != tc.want {
			t.Errorf("Stop: %v", err)
		}
	}
}

func TestAnswerThatIsNotAnEngineSaysSo(t *testing.T) {
	dir, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
			c.Close()
		}
	}()
	_, err = NewEngine(sock).Negotiate(context.Background())
	if err == nil || !strings.Contains(err.Error(), "(is this a Docker engine's socket? set containers.engine-socket)") {
		t.Errorf("Negotiate with an SSH server: %v", err)
	}
}

func TestAnswersPastTheirLimitAreRefused(t *testing.T) {
	big := strings.Repeat("x", maxBody)
	f := newFakeEngine(t, versionHandler("1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"Id":%q,"Name":%q}`, testID, big)
	}))
	_, err := NewEngine(f.socket).Inspect(context.Background(), testID)
	if err == nil || !strings.Contains(err.Error(), "answer longer than 1048576 bytes") {
		t.Errorf("Inspect of a 1 MiB answer: %v", err)
	}
}

func TestInspectReadsARecordedAnswer(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Container
	}{
		{"testdata/inspect-running-20.10.json", Container{
			ID:        "13deac42883a1a808c6ce2715c1b75f059d6a4c8aec29129cf242456397c7e92",
			Name:      "capture_me",
			Image:     "mcptrace-test/busybox:1",
			ImageID:   "sha256:5718c7443cf59edcb5266832811564d08e0a9a4542c65d0b99344b8f610dfbb3",
			Created:   time.Date(2026, 11, 26, 7, 35, 52, 618525185, time.UTC),
			Running:   true,
			Pid:       32149,
			StartedAt: time.Date(2026, 11, 26, 7, 35, 52, 772742150, time.UTC),
			Labels:    map[string]string{"com.example.team": "mcp"},
		}},
		{"testdata/inspect-created-20.10.json", Container{
			ID:      "5169387f4066b4304d3126fe2193469ce29a62dbad525afb10cb8f048519308c",
			Image:   "mcptrace-test/busybox:1",
			ImageID: "sha256:5718c7443cf59edcb5266832811564d08e0a9a4542c65d0b99344b8f610dfbb3",
			Created: time.Date(2026, 11, 26, 7, 35, 52, 803089566, time.UTC),
		}},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			body, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseInspect(body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.Name == "" {
				tc.want.Name = got.Name // a generated name
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || !got.Created.Equal(tc.want.Created) || !got.StartedAt.Equal(tc.want.StartedAt) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// `docker run -i` creates a container with OpenStdin and StdinOnce;
// `docker run -d -i` with OpenStdin alone (anyone may attach later), and
// a detached one with neither.
func TestInspectTellsAStdinItsClientAttachedOnce(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         bool
	}{
		{"docker run -i", `"OpenStdin":true,"StdinOnce":true`, true},
		{"docker run -d -i", `"OpenStdin":true,"StdinOnce":false`, false},
		{"docker run -d", `"OpenStdin":false,"StdinOnce":false`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseInspect([]byte(`{"Id":"` + testID + `","Config":{` + tc.config + `}}`))
			if err != nil || c.AttachedStdin != tc.want {
				t.Errorf("AttachedStdin = %v (%v), want %v", c.AttachedStdin, err, tc.want)
			}
		})
	}
}

func TestInspectRefusesAnswersThatMakeNoSense(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"not JSON", "<html>"},
		{"short ID", `{"Id":"` + testShort + `"}`},
		{"bad time", `{"Id":"` + testID + `","Created":"yesterday"}`},
		{"pid while not running", `{"Id":"` + testID + `","State":{"Running":false,"Pid":7}}`},
		{"negative pid", `{"Id":"` + testID + `","State":{"Running":true,"Pid":-1}}`},
		{"bad finish", `{"Id":"` + testID + `","State":{"FinishedAt":"soon"}}`},
		{"negative restarts", `{"Id":"` + testID + `","RestartCount":-1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := parseInspect([]byte(tc.body)); err == nil {
				t.Errorf("parsed %+v", c)
			}
		})
	}
	// An engine that answers about another container.
	f := newFakeEngine(t, versionHandler("1.41", "1.12", inspectAnswer(otherID)))
	if _, err := NewEngine(f.socket).Inspect(context.Background(), testID); err == nil || !strings.Contains(err.Error(), "engine answered about container 646c333886ca") {
		t.Errorf("Inspect answered about another container: %v", err)
	}
}

func TestLabelsAreBounded(t *testing.T) {
	in := map[string]string{
		"long.value":                            strings.Repeat("v", MaxLabelValueBytes+1),
		strings.Repeat("k", MaxLabelKeyBytes+1): "x",
	}
	for i := range MaxLabels + 5 {
		in[fmt.Sprintf("label.%03d", i)] = "v"
	}
	got, dropped := boundLabels(in)
	if len(got) != MaxLabels || dropped != 7 {
		t.Fatalf("kept %d, dropped %d; want %d and 7", len(got), dropped, MaxLabels)
	}
	if _, ok := got["label.000"]; !ok {
		t.Error("the smallest key was dropped")
	}
	if _, ok := got[fmt.Sprintf("label.%03d", MaxLabels)]; ok {
		t.Error("a key past the bound was kept")
	}
}

func TestListReadsARecordedAnswerAndRefusesTooManyContainers(t *testing.T) {
	body, err := os.ReadFile("testdata/list-20.10.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseList(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "13deac42883a1a808c6ce2715c1b75f059d6a4c8aec29129cf242456397c7e92" ||
		fmt.Sprint(got[0].Names) != "[capture_me]" || got[0].Image != "mcptrace-test/busybox:1" ||
		got[0].State != "running" || got[0].Labels["com.example.team"] != "mcp" || got[0].Created.Unix() != 1795678552 {
		t.Errorf("got %+v", got)
	}

	var b strings.Builder
	b.WriteString("[")
	for i := range MaxList + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"Id":"%064x"}`, i)
	}
	b.WriteString("]")
	if _, err := parseList([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than 10000 running containers") {
		t.Errorf("a list of %d: %v", MaxList+1, err)
	}
}
