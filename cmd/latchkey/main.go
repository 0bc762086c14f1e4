// Command latchkey is the command-line companion of the latchkey lock library: it lets
// shell scripts, cron jobs and operators use the same Redis locks, semaphores and latches as
// the Go and Java (Redisson) services.
//
// Usage:
//
//	latchkey <command> [flags]
//
// Commands:
//
//	run        run a command while holding a lock, a read or write lock, or a semaphore permit
//	inspect    show what Redis holds for primitives, in Redisson's layout
//	latch      set, count down or await a countdown latch
//	semaphore  set, add to or read a permit-expirable semaphore
//	unlock     force a lock free, whoever holds it
//	demo       show on an embedded Redis why locks, semaphores and latches are needed and how they behave
//	help       show this help, or a command's with "latchkey help <command>"
//
// Every command takes --redis URL (or $REDIS_URL): redis://, rediss:// for TLS, user and
// password for ACL, ?addr= for more Cluster nodes, ?master_set= for Sentinel.
//
// A cron job that must not run twice at once across hosts:
//
//	*/5 * * * * latchkey run --lock nightly-report --wait 0 -- /usr/local/bin/report
//
// Exit status:
//
//	0        success; for run, the command's own status (any status it exits with)
//	1        latchkey failed (Redis unreachable, a refused request…)
//	2        bad command line (an argument the library refuses included)
//	75       run: the lock or permit was not acquired within --wait;
//	         latch await: the count did not reach zero within --timeout
//	76       run: the lease was lost while the command ran (it was sent SIGTERM, then SIGKILL after --grace)
//	126      run: the command could not be executed
//	127      run: the command was not found
//	128+n    run: latchkey got signal n while waiting, or the command died of signal n
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	dsync "github.com/latchkey/latchkey/sync"
)

// Exit statuses; 2 for a bad command line, as the flag package and most Unix tools use. The
// statuses of run are sysexits' EX_TEMPFAIL ("try again later": the cron case) and the next
// one, and the shell's for a command that cannot be run.
const (
	exitOK           = 0
	exitFail         = 1
	exitUsage        = 2
	exitNotAcquired  = 75
	exitLeaseLost    = 76
	exitCannotExec   = 126
	exitNotFound     = 127
	exitSignalOffset = 128
)

// errUsage reports a bad command line. The command has already told the user what was
// wrong on stderr (the flag package does so itself), so run only turns it into exitUsage.
var errUsage = errors.New("usage error")

// errHelp reports that help was asked for and shown: not a failure.
var errHelp = errors.New("help requested")

// exitStatus is an error that ends latchkey with a given status: run's command's own, or
// one of latchkey's documented ones. msg, if not empty, is shown on stderr.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

// command is one subcommand. run gets the arguments after the subcommand's name; it
// returns errUsage for a bad command line and nil when asked only for help (-h).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order usage shows them, each implemented in its own
// file.
func commands() []command {
	return []command{
		{name: "run", summary: runSummary, run: runCommand},
		{name: "inspect", summary: inspectSummary, run: inspectCommand},
		{name: "latch", summary: latchSummary, run: latchCommand},
		{name: "semaphore", summary: semaphoreSummary, run: semaphoreCommand},
		{name: "unlock", summary: unlockSummary, run: unlockCommand},
		{name: "demo", summary: demoSummary, run: demoCommand},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == guardArg {
		os.Exit(guard(os.Args[2:], os.Stderr))
	}
	// Ctrl-C cancels the context, so a command stops its goroutines and closes its Redis
	// connections instead of dying half-way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name) and returns the exit
// status. It is main without the process, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			cmd, ok := lookup(rest[0])
			if !ok {
				fmt.Fprintf(stderr, "latchkey help: unknown command %q\n\n", rest[0])
				usage(stderr)
				return exitUsage
			}
			// Asked for, so the help is the output, not a diagnostic.
			return exitCode(cmd, cmd.run(ctx, []string{"-h"}, stdout, stdout), stderr)
		}
		usage(stdout)
		return exitOK
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "latchkey: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return exitCode(cmd, cmd.run(ctx, rest, stdout, stderr), stderr)
}

func exitCode(cmd command, err error, stderr io.Writer) int {
	var status *exitStatus
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, dsync.ErrInvalidArgument):
		// What the library refuses as an argument came from the command line (a name a
		// Cluster cannot take, too many permits): a bad command line too.
		fmt.Fprintf(stderr, "latchkey %s: %v\n", cmd.name, err)
		return exitUsage
	case errors.As(err, &status):
		if status.msg != "" {
			fmt.Fprintf(stderr, "latchkey %s: %s\n", cmd.name, status.msg)
		}
		return status.code
	default:
		fmt.Fprintf(stderr, "latchkey %s: %v\n", cmd.name, err)
		return exitFail
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "latchkey: distributed locks on Redis, wire-compatible with Redisson.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: latchkey <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this help; \"latchkey help <command>\" shows a command's flags")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --redis URL (default $REDIS_URL, else redis://localhost:6379).")
	fmt.Fprintln(w, "Exit status: 0 success (run: the command's own), 1 failure, 2 bad command line;")
	fmt.Fprintln(w, "run: 75 not acquired within --wait, 76 lease lost while the command ran, 126/127")
	fmt.Fprintln(w, "command not executable/found, 128+n signal n; latch await: 75 timed out.")
}
