package main

import (
	"context"
	"os"
	"runtime"
	"strings"
)

func readEnv(ctx context.Context, root, bin string) envInfo {
	e := envInfo{
		kernel:    sh(ctx, "uname", "-r"),
		cpus:      runtime.NumCPU(),
		goVersion: sh(ctx, "go", "version"),
		commit:    sh(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD"),
		dirty:     sh(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no") != "",
		bpftrace:  sh(ctx, "bpftrace", "--version"),
	}
	if e.goVersion == "" {
		e.goVersion = runtime.Version() + " (bench)"
	}
	if v := sh(ctx, "forkstat", "-h"); v != "" {
		e.forkstat = strings.SplitN(v, "\n", 2)[0]
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		line := strings.SplitN(string(data), "\n", 2)[0]
		e.memTotal = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
	}
	e.loadavg = loadavg()
	return e
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
