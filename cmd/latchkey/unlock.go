package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

const unlockSummary = "force a lock free, whoever holds it"

// unlockSpec is the help of "latchkey unlock".
func unlockSpec() spec {
	return spec{
		synopsis: "unlock --force [--yes] NAME",
		about: `Deletes the lock NAME whoever holds it, and wakes its waiters (a fair lock's next waiter
gets it), as Redisson's forceUnlock does. The holder is not told: its next renewal finds
the lock gone, and a "latchkey run" holding it ends its command (exit 76). On a terminal it
shows the lock and asks first, unless --yes. A read-write lock is refused: the library offers no force unlock for one.`,
		examples: []string{
			"latchkey unlock --force db-migrate",
			"latchkey unlock --force --yes nightly-report   # from a script",
		},
	}
}

// unlockCommand is "latchkey unlock".
func unlockCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("unlock", unlockSpec(), stderr)
	force := fs.Bool("force", false, "required: latchkey holds nothing of its own to unlock, so it can only force")
	yes := fs.Bool("yes", false, "do not ask for confirmation on a terminal")
	url := redisFlag(fs)
	names, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case !*force:
		return usageError(fs, "only --force unlocking is possible: the holder is another process")
	case len(names) != 1 || names[0] == "":
		return usageError(fs, "give one lock NAME")
	}
	name := names[0]
	s, err := connectURL("unlock", *url, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	st, err := readState(ctx, s.rdb, name)
	if err != nil {
		return err
	}
	var unlock func(context.Context) (bool, error)
	switch st.Kind {
	case kindLock:
		unlock = s.c.Lock(name).ForceUnlock
	case kindFencedLock:
		unlock = s.c.FencedLock(name).ForceUnlock
	case kindFairLock:
		unlock = s.c.FairLock(name).ForceUnlock
	case kindNone:
		fmt.Fprintf(stdout, "%q is not locked\n", name)
		return nil
	default:
		return fmt.Errorf("%q is a %s: only locks, fair locks and fenced locks can be force-unlocked", name, st.Kind)
	}
	if _, ok := terminal(os.Stdin); ok && !*yes {
		if err := writeTable(stderr, []state{st}); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "Force-unlock %s %q? [y/N] ", st.Kind, name)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return &exitStatus{code: exitFail, msg: "not confirmed: nothing changed"}
		}
	}
	freed, err := unlock(ctx)
	if err != nil {
		return err
	}
	if freed {
		fmt.Fprintf(stdout, "%q force-unlocked\n", name)
	} else {
		fmt.Fprintf(stdout, "%q was not locked\n", name)
	}
	return nil
}
