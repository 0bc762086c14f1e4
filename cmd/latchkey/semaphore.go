package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
)

const semaphoreSummary = "set, add to or read a permit-expirable semaphore"

// semaphoreSpec is the help of "latchkey semaphore".
func semaphoreSpec() spec {
	return spec{
		synopsis: "semaphore NAME (set N | add N | available) [flags]",
		about: `Works the permit-expirable semaphore (Redisson's RPermitExpirableSemaphore) that
"latchkey run --semaphore" takes permits of:
  set N        makes its permits N in all, acquired ones included
  add N        adds N permits (a negative N takes them away)
  available    prints the permits available now`,
		examples: []string{
			"latchkey semaphore batch set 5",
			"latchkey semaphore batch add -- -2     # a negative N goes after --",
			"latchkey semaphore batch available",
		},
	}
}

// semaphoreCommand is "latchkey semaphore".
func semaphoreCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("semaphore", semaphoreSpec(), stderr)
	url := redisFlag(fs)
	name, verb, rest, err := parseOperation(fs, args, "set N, add N or available")
	if err != nil {
		return err
	}
	n := 0
	switch verb {
	case "set", "add":
		if len(rest) != 1 {
			return usageError(fs, "%s takes the number of permits N", verb)
		}
		if n, err = strconv.Atoi(rest[0]); err != nil {
			return usageError(fs, "%s: N must be a whole number, got %q", verb, rest[0])
		}
		if verb == "set" && n < 0 {
			return usageError(fs, "set: N must not be negative, got %d", n)
		}
	case "available":
		if len(rest) > 0 {
			return usageError(fs, "available takes no argument, got %q", rest[0])
		}
	default:
		return usageError(fs, "unknown semaphore operation %q: want set, add or available", verb)
	}
	s, err := connectURL("semaphore", *url, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	sem := s.c.PermitSemaphore(name)
	switch verb {
	case "set":
		return sem.SetPermits(ctx, n)
	case "add":
		return sem.AddPermits(ctx, n)
	}
	avail, err := sem.AvailablePermits(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, avail)
	return err
}
