package main

import (
	"slices"
	"strings"
	"testing"
)

func TestSelectNamedKeepsTheOrderAndRefusesUnknownNames(t *testing.T) {
	all := []string{"baseline", "mcptrace", "mcptrace, no history", "bpftrace"}
	id := func(s string) string { return s }
	tests := []struct {
		name, list string
		keep       []string
		want       []string
		err        string
	}{
		{"empty list: everything", "", []string{"baseline"}, all, ""},
		{"named ones in the order of all, with what is kept", "mcptrace, no history; mcptrace", []string{"baseline"}, []string{"baseline", "mcptrace", "mcptrace, no history"}, ""},
		{"nothing kept", "bpftrace", nil, []string{"bpftrace"}, ""},
		{"an unknown name is an error that lists the names", "mcptrace;perf", []string{"baseline"}, nil, `-x "mcptrace;perf" names something the bench does not have (it has baseline; mcptrace; mcptrace, no history; bpftrace)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectNamed(all, id, "-x", tt.list, tt.keep...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
