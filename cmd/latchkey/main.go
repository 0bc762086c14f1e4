// Command latchkey is the command-line companion of the latchkey lock library.
//
// Usage:
//
//	latchkey <command> [flags]
//
// Commands:
//
//	demo    show on an embedded Redis why locks, semaphores and latches are needed and how they behave
//	help    show this help, or a command's flags with "latchkey help <command>"
//
// Exit status: 0 on success, 1 when a command fails, 2 on a bad command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses; 2 for a bad command line, as the flag package and most Unix tools use.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// errUsage reports a bad command line. The command has already told the user what was
// wrong on stderr (the flag package does so itself), so run only turns it into exitUsage.
var errUsage = errors.New("usage error")

// command is one subcommand. run gets the arguments after the subcommand's name; it
// returns errUsage for a bad command line and nil when asked only for help (-h).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order usage shows them. New ones (run, inspect)
// go here, each implemented in its own file.
func commands() []command {
	return []command{
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
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
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
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "show this help; \"latchkey help <command>\" shows a command's flags")
}
