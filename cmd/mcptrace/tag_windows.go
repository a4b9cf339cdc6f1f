package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// runTagged runs run's command on Windows, where a process cannot exec
// into another and no agent runs yet: `mcptrace run` starts CMD itself in
// a Job Object and ends what it left when it exits. `mcptrace exec`
// needs the agent to read its tag, so it says it is not supported.
func runTagged(cmd *cobra.Command, id string, args []string) error {
	if cmd.Name() != "run" {
		return fmt.Errorf("mcptrace %s is not supported on Windows yet: sub-session tags are read by the agent, which does not run on Windows; use mcptrace run", cmd.Name())
	}
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	ec, err := cfg.EnforcerConfig()
	if err != nil {
		return fmt.Errorf("enforcer configuration: %w", err)
	}
	if id == "" {
		id = fmt.Sprintf("run-%d", os.Getpid())
	}
	return runInJob(cmd.Context(), cmd.ErrOrStderr(), cfg.NewLogger(cmd.ErrOrStderr()), ec, id, args)
}

// runInJob runs argv as the root of session id inside a Job Object that
// kills what it holds when its last handle closes: the root is created
// suspended and put in the job before it runs, so everything it starts,
// at any depth, is in the job and cannot leave it. When the root exits,
// the enforcer ends the job's processes under the configured policy,
// spare rules and mode, each through a handle checked against its
// identity, and reports what it ended. If mcptrace itself dies, the
// kernel closes the job and kills them all. What a spare rule or audit
// mode left alive is let out of that guarantee (kill-on-close is
// cleared) so that closing the job does not end it. The exit status is
// the root's.
func runInJob(ctx context.Context, stderr io.Writer, log *slog.Logger, ec enforcer.Config, id string, argv []string) error {
	clock, err := winproc.SystemClock()
	if err != nil {
		return err
	}
	job, err := winproc.NewJob()
	if err != nil {
		return err
	}
	defer job.Close()
	root := exec.Command(argv[0], argv[1:]...)
	root.Stdin, root.Stdout, root.Stderr = os.Stdin, os.Stdout, stderr
	rh, err := job.Start(root)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return exitError{code: 127, err: err}
		}
		return exitError{code: 126, err: fmt.Errorf("start %s: %w", argv[0], err)}
	}
	rh.Close()
	werr := root.Wait()
	code := root.ProcessState.ExitCode()
	e := enforcer.New(ec, nil, log)
	var listErr error
	r := e.End(context.WithoutCancel(ctx), enforcer.Ending{
		Session: id,
		Reason:  "root exited",
		Members: func() []lineage.Process {
			ms, err := job.Members(clock)
			if err != nil {
				listErr = err
			}
			return ms
		},
	})
	if listErr != nil {
		log.Error("listing the job's processes", "session", id, "err", listErr)
	}
	// Kill-on-close ends whatever is still in the job when mcptrace
	// exits: only what the enforcer decided to end may be left to it.
	// Audit mode ends nothing, and a list of the job that could not be
	// read proves nothing (a spared member may be in it): then the job
	// keeps its processes, a leak that is logged rather than an end
	// nobody decided.
	if r.Spared > 0 || r.WouldKill > 0 || listErr != nil || e.Config().Mode == enforcer.ModeAudit {
		if err := job.KeepOnClose(); err != nil {
			log.Error("spared members stay in a job that kills them when mcptrace exits", "session", id, "err", err)
		}
	}
	if n := r.Killed + r.Spared + r.WouldKill + r.Failed + r.Refused; n > 0 {
		fmt.Fprintf(stderr, "mcptrace: session %s ended: %d killed, %d exited, %d spared, %d would be killed (audit), %d failed, %d refused\n",
			id, r.Killed, r.ExitedBeforeSignal, r.Spared, r.WouldKill, r.Failed, r.Refused)
	}
	if werr != nil && root.ProcessState == nil {
		return fmt.Errorf("wait for %s: %w", argv[0], werr)
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}
