//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: Linux only (eBPF, /proc, pidfds)")
	os.Exit(1)
}
