//go:build linux

// Command debianroot makes the Debian root the tests share (bookworm with
// debian.SystemdRoot: deploy's package test and vmtests/systemd) in the
// cache debian.Bootstrap keeps, so that make check pays for debootstrap
// beside vet instead of inside the test stage. It needs root (as
// debootstrap does) and prints how long it took.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/mcptrace/mcptrace/internal/debian"
)

func main() {
	start := time.Now()
	dir, err := os.MkdirTemp("", "mcptrace-debianroot-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "debianroot:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := debian.Bootstrap(ctx, "bookworm", dir, debian.SystemdRoot...); err != nil {
		fmt.Fprintln(os.Stderr, "debianroot:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	cache, _ := debian.RootCacheDir()
	fmt.Printf("debianroot: bookworm with systemd cached in %s in %s\n", cache, time.Since(start).Round(time.Second))
}
