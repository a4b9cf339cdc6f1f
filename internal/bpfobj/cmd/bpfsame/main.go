// Command bpfsame compares BPF objects by what they hold (package
// bpfobj), not by their bytes.
//
//	bpfsame OLD NEW         exit 0 when the two hold the same program;
//	                        1, printing what differs, when not
//	bpfsame -keep FILE      after bpf2go: when FILE differs from the
//	                        committed one (git HEAD) only in the order
//	                        clang numbered its BTF types, put the
//	                        committed bytes back, so that `make generate`
//	                        and CI's check see no change where there is
//	                        none; a real change is left for git diff
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/mcptrace/mcptrace/internal/bpfobj"
)

const shown = 40

func main() {
	keep := flag.Bool("keep", false, "put FILE's committed bytes back when it holds the same program")
	flag.Parse()
	var err error
	if *keep && flag.NArg() == 1 {
		err = keepCommitted(flag.Arg(0))
	} else if !*keep && flag.NArg() == 2 {
		var same bool
		same, err = compare(flag.Arg(0), flag.Arg(1))
		if err == nil && !same {
			os.Exit(1)
		}
	} else {
		fmt.Fprintln(os.Stderr, "usage: bpfsame OLD NEW | bpfsame -keep FILE")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bpfsame:", err)
		os.Exit(2)
	}
}

// compare prints what differs between the objects at a and b.
func compare(a, b string) (bool, error) {
	ca, err := bpfobj.Canonical(a)
	if err != nil {
		return false, err
	}
	cb, err := bpfobj.Canonical(b)
	if err != nil {
		return false, err
	}
	diff := bpfobj.Diff(ca, cb, shown)
	if diff == nil {
		return true, nil
	}
	fmt.Printf("bpfsame: %s and %s hold different programs (- only in the first, + only in the second):\n", a, b)
	for _, l := range diff {
		fmt.Println(l)
	}
	return false, nil
}

func keepCommitted(file string) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	dir := filepath.Dir(abs)
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("%s: not in a git checkout: %w", file, err)
	}
	rel, err := filepath.Rel(string(bytes.TrimSpace(top)), abs)
	if err != nil {
		return err
	}
	committed, err := exec.Command("git", "-C", dir, "show", "HEAD:"+filepath.ToSlash(rel)).Output()
	if err != nil {
		fmt.Printf("bpfsame: %s: no committed version to keep\n", file)
		return nil
	}
	fresh, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if bytes.Equal(fresh, committed) {
		return nil
	}
	tmp, err := os.CreateTemp("", "bpfsame-*.o")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(committed); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	a, err := bpfobj.Canonical(tmp.Name())
	if err != nil {
		return fmt.Errorf("the committed %s: %w", file, err)
	}
	b, err := bpfobj.Canonical(file)
	if err != nil {
		return err
	}
	if diff := bpfobj.Diff(a, b, shown); diff != nil {
		fmt.Printf("bpfsame: %s: a new program (git diff shows it changed); what differs from the committed one:\n", file)
		for _, l := range diff {
			fmt.Println(l)
		}
		return nil
	}
	if err := os.WriteFile(file, committed, 0o644); err != nil {
		return err
	}
	fmt.Printf("bpfsame: %s: the same program as committed, its BTF types numbered in another order by clang: kept the committed bytes\n", file)
	return nil
}
