package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// TestCheckpointStreamedIsTheDocsJSON: a checkpoint written a node at a
// time (checkpointDoc.encode) is the document json.Marshal makes of it,
// byte for byte once compacted, and decodes to it; also when a string
// elsewhere in it, or a map's key, reads "graph".
func TestCheckpointStreamedIsTheDocsJSON(t *testing.T) {
	nodes := []lineage.NodeState{
		{Process: lineage.Process{ID: lineage.ID{PID: 1, Start: 1}, Comm: "init"}},
		{Process: lineage.Process{ID: lineage.ID{PID: 7, Start: 9}, Creator: lineage.ID{PID: 1, Start: 1}, Comm: "caf\xc3",
			Images: []lineage.Image{{Filename: "/bin/sh", Argv: []string{"sh", "-c", `echo "graph":{}`}}}}},
	}
	for _, doc := range []checkpointDoc{
		{Version: checkpointVersion, Events: map[string]uint64{}},
		{Version: checkpointVersion, WrittenAt: 5, Graph: lineage.State{Clock: 9, Nodes: nodes},
			Events: map[string]uint64{"graph": 3, "exec": 2}, Reports: []keyedReport{{Key: `"graph":`}}},
	} {
		want, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var streamed, compact bytes.Buffer
		if err := doc.encode(&streamed); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&compact, streamed.Bytes()); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, streamed.Bytes())
		}
		if !bytes.Equal(compact.Bytes(), want) {
			t.Errorf("streamed:\n%s\njson.Marshal:\n%s", compact.Bytes(), want)
		}
		var back checkpointDoc
		if err := json.Unmarshal(streamed.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Graph, doc.Graph) {
			t.Errorf("graph came back as %+v, want %+v", back.Graph, doc.Graph)
		}
		if len(doc.Graph.Nodes) > 0 && !strings.Contains(streamed.String(), "raw_strings") {
			t.Errorf("a comm that is not UTF-8 went without raw_strings:\n%s", streamed.Bytes())
		}
	}
}

// TestCheckpointRedactsEachCommandLineOnce: equal command lines of many
// nodes share one redacted argv; each is redacted as stateArgv does.
func TestCheckpointRedactsEachCommandLineOnce(t *testing.T) {
	secret := []string{"node", "server.js", "--api-key", "CHECKPOINTSECRET1"}
	var s lineage.State
	for i := range 3 {
		s.Nodes = append(s.Nodes, lineage.NodeState{Process: lineage.Process{ID: lineage.ID{PID: uint32(10 + i), Start: uint64(i + 1)},
			Images: []lineage.Image{{Argv: append([]string(nil), secret...)}, {Argv: []string{"node", "server.js", "--api-key"}}}}})
	}
	redactGraph(&s)
	want := stateArgv(secret)
	if strings.Contains(strings.Join(want, " "), "CHECKPOINTSECRET1") {
		t.Fatalf("stateArgv kept the secret: %q", want)
	}
	for i, n := range s.Nodes {
		if got := n.Images[0].Argv; !reflect.DeepEqual(got, want) || &got[0] != &s.Nodes[0].Images[0].Argv[0] {
			t.Errorf("node %d: argv %q, want %q shared with node 0's", i, got, want)
		}
		if got := n.Images[1].Argv; !reflect.DeepEqual(got, stateArgv([]string{"node", "server.js", "--api-key"})) {
			t.Errorf("node %d: a prefix of the secret's command line became %q", i, got)
		}
	}
}
