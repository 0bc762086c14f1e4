package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
)

const latchSummary = "set, count down or await a countdown latch"

// latchSpec is the help of "latchkey latch".
func latchSpec() spec {
	return spec{
		synopsis: "latch NAME (set N | count-down | await [--timeout D]) [flags]",
		about: `Works a countdown latch (Redisson's RCountDownLatch):
  set N        gives the latch the count N if it has none (exit 1 if it has one already)
  count-down   takes one off the count; at zero the latch opens and its awaiters go on
  await        waits until the count is zero; with --timeout, exits 75 if it is not by then`,
		examples: []string{
			"latchkey latch workers-done set 5",
			"latchkey latch workers-done count-down        # in each of the five workers",
			"latchkey latch workers-done await --timeout 1h && ./merge-results",
		},
	}
}

// latchCommand is "latchkey latch".
func latchCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("latch", latchSpec(), stderr)
	var timeout optDuration
	fs.Var(&timeout, "timeout", "with await: give up after `D` (exit 75)")
	url := redisFlag(fs)
	name, verb, rest, err := parseOperation(fs, args, "set N, count-down or await")
	if err != nil {
		return err
	}
	n := 0
	switch {
	case verb == "set" && len(rest) != 1:
		return usageError(fs, "set takes the count N")
	case verb == "set":
		if n, err = strconv.Atoi(rest[0]); err != nil || n < 1 {
			return usageError(fs, "set: the count N must be a whole number of at least 1, got %q", rest[0])
		}
	case verb != "count-down" && verb != "await":
		return usageError(fs, "unknown latch operation %q: want set, count-down or await", verb)
	case len(rest) > 0:
		return usageError(fs, "%s takes no argument, got %q", verb, rest[0])
	}
	if timeout.set && verb != "await" {
		return usageError(fs, "--timeout goes with await")
	}
	s, err := connectURL("latch", *url, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	l := s.c.CountDownLatch(name)
	switch verb {
	case "set":
		ok, err := l.TrySetCount(ctx, n)
		if err != nil {
			return err
		}
		if !ok {
			count, err := l.Count(ctx)
			if err != nil {
				return err
			}
			return fmt.Errorf("latch %q has a count already (%d): it is set again only once it has reached zero", name, count)
		}
		return nil
	case "count-down":
		return l.CountDown(ctx)
	}
	actx := ctx
	if timeout.set {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, timeout.d)
		defer cancel()
	}
	if err := l.Await(actx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The count may have reached zero as the timeout ran out: that is the latch open.
			count, cerr := l.Count(ctx)
			switch {
			case cerr != nil:
				return cerr
			case count == 0:
				return nil
			}
			return &exitStatus{code: exitNotAcquired, msg: fmt.Sprintf("latch %q still counts %d after --timeout %v", name, count, timeout.d)}
		}
		return err
	}
	return nil
}
