// Package bpfobj says whether two BPF objects hold the same program,
// whatever order clang numbered their BTF types in.
//
// clang-19 writes the forward declarations of a BTF section in an order
// that depends on its heap layout: the same source compiled in
// /tmp/ab/gen and in /tmp/abcdefgh/gen gives two objects that differ
// only in the numbers of those types (and of every type pointing at
// them). A byte comparison of a committed bpf2go object with a fresh one
// then fails on one machine and passes on another (CI failed so at
// a320d64). Canonical describes an object by what the kernel loads from
// it: programs (instructions, their CO-RE relocations by type and
// accessor, their source lines), maps, variables and the multiset of BTF
// types, all by name and shape and never by type ID.
//
// It does not load anything, check that the kernel accepts the object,
// or compare the Go bindings bpf2go writes beside it (those are text and
// compared byte for byte).
package bpfobj

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// localID is the type ID a CO-RE relocation prints: a number, not part
// of the program's meaning.
var localID = regexp.MustCompile(`local_id=\d+`)

// typeDepth is how deep a BTF type is described: deep enough that two
// types of one name and kind but other members differ.
const typeDepth = 3

// Canonical returns the description of the BPF object at path, one item
// a line, equal for two objects exactly when they hold the same programs,
// maps, variables and types.
func Canonical(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	spec, err := ebpf.LoadCollectionSpecFromReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	for _, name := range sorted(spec.Programs) {
		p := spec.Programs[name]
		add("program %s type=%s attach=%s to=%q section=%q license=%q flags=%d", name, p.Type, p.AttachType, p.AttachTo, p.SectionName, p.License, p.Flags)
		for i, ins := range p.Instructions {
			out = append(out, fmt.Sprintf("  %s %4d ", name, i)+instruction(ins))
		}
	}
	for _, name := range sorted(spec.Maps) {
		describeMap(add, "map", spec.Maps[name])
	}
	for _, name := range sorted(spec.Variables) {
		v := spec.Variables[name]
		add("variable %s %s", name, v)
	}
	if spec.Types != nil {
		var types []string
		for t, err := range spec.Types.All() {
			if err != nil {
				return nil, fmt.Errorf("%s: BTF: %w", path, err)
			}
			types = append(types, fmt.Sprintf("type %*v", typeDepth, t))
		}
		sort.Strings(types)
		out = append(out, types...)
	}
	return out, nil
}

// instruction describes ins with its source line and CO-RE relocation;
// a relocation's local type ID, and the constant of an instruction that
// loads a type ID, are left out.
func instruction(ins asm.Instruction) string {
	var b strings.Builder
	relo := btf.CORERelocationMetadata(&ins)
	text := fmt.Sprint(ins)
	if relo != nil {
		r := localID.ReplaceAllString(relo.String(), "local_id=_")
		if strings.Contains(r, "type_id") {
			text = fmt.Sprintf("%v imm=_", ins.OpCode)
		}
		text += " " + r
	}
	b.WriteString(text)
	if src := ins.Source(); src != nil {
		b.WriteString(" // ")
		b.WriteString(strings.TrimSpace(src.String()))
		if l, ok := src.(*btf.Line); ok {
			fmt.Fprintf(&b, " (%s:%d)", l.FileName(), l.LineNumber())
		}
	}
	return b.String()
}

func describeMap(add func(string, ...any), what string, m *ebpf.MapSpec) {
	add("%s %s type=%s key=%d value=%d max=%d flags=%d pinning=%d extra=%d key=%*v value=%*v",
		what, m.Name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags, m.Pinning, m.MapExtra, typeDepth, m.Key, typeDepth, m.Value)
	for _, kv := range m.Contents {
		add("  %s contents %v=%v", m.Name, kv.Key, kv.Value)
	}
	if m.InnerMap != nil {
		describeMap(add, "  inner", m.InnerMap)
	}
}

func sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Diff returns the lines of a and b that the other lacks, at most max of
// them, prefixed "-" (only in a) and "+" (only in b); nil when the two
// are the same.
func Diff(a, b []string, max int) []string {
	count := map[string]int{}
	for _, l := range a {
		count[l]++
	}
	for _, l := range b {
		count[l]--
	}
	var out []string
	seen := map[string]bool{}
	for _, l := range append(append([]string(nil), a...), b...) {
		if seen[l] || count[l] == 0 {
			continue
		}
		seen[l] = true
		if len(out) == max {
			out = append(out, "…")
			break
		}
		if count[l] > 0 {
			out = append(out, "- "+l)
		} else {
			out = append(out, "+ "+l)
		}
	}
	return out
}
