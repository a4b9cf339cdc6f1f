package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stormC forks as fast as it can for SECONDS or until MAX children
// (0: no bound), and prints "children seconds". Mode f: the child
// _exit(0)s; mode e: the child execs TRUE (a static true). Mode w forks
// nothing: it writes one byte to /dev/null in a loop and counts the
// writes (a system call the container request reader, when it was on
// sys_enter, made every process pay for). Mode r forks nothing either:
// it writes one byte into a unix stream socket pair and reads it from
// the other end, in a loop, and counts the reads: the hook the container
// request reader is on (a socket read's copy to user space).
const stormC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: storm f|e|w|r SECONDS MAX [TRUE]\n");
		return 2;
	}
	char mode = argv[1][0];
	double secs = atof(argv[2]);
	long max = atol(argv[3]);
	char *tp = argc > 4 ? argv[4] : "/bin/true";
	char *cargv[] = {tp, NULL};
	double start = now(), el = 0;
	long n = 0;
	if (mode == 'r') {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
			perror("socketpair");
			return 1;
		}
		char c = 'x';
		for (;;) {
			if (write(sv[0], &c, 1) != 1 || read(sv[1], &c, 1) != 1) {
				perror("socket pair");
				return 1;
			}
			n++;
			if (max > 0 && n >= max)
				break;
			if ((n & 4095) == 0 && secs > 0 && now() - start >= secs)
				break;
		}
		printf("%ld %.6f\n", n, now() - start);
		return 0;
	}
	if (mode == 'w') {
		FILE *f = fopen("/dev/null", "w");
		if (!f) {
			perror("/dev/null");
			return 1;
		}
		int fd = fileno(f);
		char c = 'x';
		for (;;) {
			if (write(fd, &c, 1) != 1) {
				perror("write");
				return 1;
			}
			n++;
			if (max > 0 && n >= max)
				break;
			if ((n & 4095) == 0 && secs > 0 && now() - start >= secs)
				break;
		}
		printf("%ld %.6f\n", n, now() - start);
		return 0;
	}
	for (;;) {
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			return 1;
		}
		if (p == 0) {
			if (mode == 'e')
				execv(tp, cargv);
			_exit(0);
		}
		int st;
		if (waitpid(p, &st, 0) < 0) {
			perror("waitpid");
			return 1;
		}
		n++;
		if (max > 0 && n >= max)
			break;
		if ((n & 31) == 0 && secs > 0 && now() - start >= secs)
			break;
	}
	el = now() - start;
	printf("%ld %.6f\n", n, el);
	return 0;
}
`

const trueC = "int main(void) { return 0; }\n"

// tools are the compiled workload programs.
type tools struct {
	dir      string
	stormBin string // stormC
	true_    string // trueC, static
}

// buildTools compiles the workload programs with gcc -O2 -static.
func buildTools(ctx context.Context, dir string) (*tools, error) {
	t := &tools{dir: dir, stormBin: filepath.Join(dir, "storm"), true_: filepath.Join(dir, "true")}
	for _, p := range []struct{ src, out string }{{stormC, t.stormBin}, {trueC, t.true_}} {
		src := p.out + ".c"
		if err := os.WriteFile(src, []byte(p.src), 0o644); err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-static", "-o", p.out, src).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gcc %s: %w: %s", src, err, out)
		}
	}
	return t, nil
}

// stormResult is one storm process's output.
type stormResult struct {
	children int64
	seconds  float64
}

func (r stormResult) rate() float64 { return float64(r.children) / r.seconds }

// storm runs the storm program (mode 'f' or 'e') for secs seconds or max
// children, pinned to cpu when cpu ≥ 0, with workers copies in parallel,
// and returns their sum (children) and longest time.
func (t *tools) storm(ctx context.Context, mode byte, secs float64, max int64, cpu, workers int) (stormResult, error) {
	var (
		mu  sync.Mutex
		sum stormResult
		wg  sync.WaitGroup
		err error
	)
	timeout := time.Duration(secs*float64(time.Second)) + 10*time.Minute
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{t.stormBin, string(mode), strconv.FormatFloat(secs, 'f', 3, 64), strconv.FormatInt(max, 10), t.true_}
			if cpu >= 0 {
				args = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
			}
			out, e := exec.CommandContext(ctx, args[0], args[1:]...).Output()
			var r stormResult
			if e == nil {
				_, e = fmt.Sscan(string(out), &r.children, &r.seconds)
			}
			mu.Lock()
			defer mu.Unlock()
			if e != nil {
				err = fmt.Errorf("storm %c: %w", mode, e)
				return
			}
			sum.children += r.children
			sum.seconds = max64(sum.seconds, r.seconds)
		}()
	}
	wg.Wait()
	return sum, err
}

func max64(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// makeProject writes a small C project (files .c files and a Makefile)
// under dir, a realistic mix of compiler processes.
func makeProject(dir string, files int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var objs, decls, calls strings.Builder
	for i := 0; i < files; i++ {
		src := fmt.Sprintf(`#include <string.h>
#include <stdlib.h>
struct item%d { int key; char name[32]; };
static int cmp%d(const void *a, const void *b) {
	return ((const struct item%d *)a)->key - ((const struct item%d *)b)->key;
}
int unit%d(int n) {
	struct item%d items[64];
	for (int i = 0; i < 64; i++) { items[i].key = (i * %d + n) %% 97; memset(items[i].name, 'a' + i %% 26, 31); items[i].name[31] = 0; }
	qsort(items, 64, sizeof items[0], cmp%d);
	return items[n %% 64].key + (int)strlen(items[0].name);
}
`, i, i, i, i, i, i, i+7, i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("u%d.c", i)), []byte(src), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&objs, " u%d.o", i)
		fmt.Fprintf(&decls, "int unit%d(int);\n", i)
		fmt.Fprintf(&calls, "\ts += unit%d(argc);\n", i)
	}
	mainC := "#include <stdio.h>\n" + decls.String() + "int main(int argc, char **argv) {\n\tint s = 0;\n" + calls.String() + "\tprintf(\"%d\\n\", s);\n\treturn 0;\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(mainC), 0o644); err != nil {
		return err
	}
	mk := "OBJS = main.o" + objs.String() + "\n" +
		"prog: $(OBJS)\n\tcc -o $@ $(OBJS)\n" +
		"%.o: %.c\n\tcc -O1 -c -o $@ $<\n" +
		"clean:\n\trm -f prog *.o\n"
	return os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644)
}

// makeBuilds runs n clean builds of the project (make -j2) and returns
// builds per second.
func makeBuilds(ctx context.Context, dir string, n int) (float64, error) {
	var total time.Duration
	for i := 0; i < n; i++ {
		if out, err := exec.CommandContext(ctx, "make", "-s", "-C", dir, "clean").CombinedOutput(); err != nil {
			return 0, fmt.Errorf("make clean: %w: %s", err, out)
		}
		start := time.Now()
		if out, err := exec.CommandContext(ctx, "sh", "-c", "make -s -j2 -C "+dir+" && "+dir+"/prog >/dev/null").CombinedOutput(); err != nil {
			return 0, fmt.Errorf("make: %w: %s", err, out)
		}
		total += time.Since(start)
	}
	return float64(n) / total.Seconds(), nil
}

// npmExecs runs `npm exec --offline -- node-which node` n times in the
// MCP host's directory (its node_modules, installed by
// scripts/setup.sh test) and returns runs per second.
func npmExecs(ctx context.Context, hostDir string, n int) (float64, error) {
	start := time.Now()
	for i := 0; i < n; i++ {
		cmd := exec.CommandContext(ctx, "npm", "exec", "--offline", "--", "node-which", "node")
		cmd.Dir = hostDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("npm exec in %s: %w: %s", hostDir, err, out)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
