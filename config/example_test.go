package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestExampleLoadsAsTheDefaults: the example file sets nothing as it is,
// and with every option uncommented it still loads to Default: each
// value written is the default, in a form Load reads back.
func TestExampleLoadsAsTheDefaults(t *testing.T) {
	isolate(t)
	var b bytes.Buffer
	if err := WriteExample(&b); err != nil {
		t.Fatal(err)
	}
	asIs, err := Load(writeFile(t, b.String()), nil)
	if err != nil {
		t.Fatalf("the example as written: %v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(asIs, Default()) {
		t.Fatalf("the example as written is not the defaults:\n%+v", asIs)
	}
	var un strings.Builder
	keys := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "  #") && !strings.HasPrefix(line, "  # ") {
			line = "  " + strings.TrimPrefix(line, "  #")
			keys++
		}
		un.WriteString(line + "\n")
	}
	d := Default()
	if keys != len(d.options()) {
		t.Fatalf("%d options uncommented, want every one of %d", keys, len(d.options()))
	}
	all, err := Load(writeFile(t, un.String()), nil)
	if err != nil {
		t.Fatalf("the example with every option set: %v\n%s", err, un.String())
	}
	// An empty list read from the file is an empty list, not nil.
	all.Sessions.Rules, all.Enforcer.Spare = nil, nil
	if !reflect.DeepEqual(all, Default()) {
		t.Fatalf("the example with every option set is not the defaults:\n got %+v\nwant %+v", all, Default())
	}
}
