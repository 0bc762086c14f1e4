package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// spec describes one subcommand for its help: the synopsis after "latchkey", what it does,
// and examples (shell lines).
type spec struct {
	synopsis string
	about    string
	examples []string
}

// newFlags returns the flag set of a subcommand, writing errors and help to output, with
// the help laid out from s. Flags are shown GNU-style (--name), which the flag package
// accepts as it accepts -name.
func newFlags(name string, s spec, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("latchkey "+name, flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: latchkey %s\n\n%s\n", s.synopsis, strings.TrimSpace(s.about))
		if len(s.examples) > 0 {
			fmt.Fprintln(w, "\nexamples:")
			for _, e := range s.examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs)
	}
	return fs
}

// printFlags lists fs's flags as "  --name TYPE   usage (default x)".
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if kind != "" {
			head += " " + kind
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %-22s %s%s\n", head, usage, def)
	})
}

// parse parses args, flags and operands in any order up to a "--", after which everything
// is an operand. It returns the operands; errUsage for a bad command line (the flag package
// has said why), errHelp when -h was asked for.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(operands, rest...), nil
		}
		if len(rest) == 0 {
			return operands, nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// parseOperation parses args (parse) as "NAME VERB [operand...]", a primitive's name and
// what to do with it; without both, it is a usage error that lists verbs, what can be done.
func parseOperation(fs *flag.FlagSet, args []string, verbs string) (name, verb string, rest []string, err error) {
	ops, err := parse(fs, args)
	if err != nil {
		return "", "", nil, err
	}
	if len(ops) < 2 || ops[0] == "" {
		return "", "", nil, usageError(fs, "give a NAME and what to do: %s", verbs)
	}
	return ops[0], ops[1], ops[2:], nil
}

// usageError reports a bad command line: it prints msg and fs's help to fs's output and
// returns errUsage.
func usageError(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return errUsage
}

// optDuration is a duration flag that knows whether it was given, for flags whose absence
// means "no limit" rather than any duration.
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (such as 30s, 2m, 1h)")
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	o.d, o.set = d, true
	return nil
}

// positiveDuration is a duration flag that must be above zero.
type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return ""
	}
	return p.d.String()
}

func (p positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (such as 30s, 2m, 1h)")
	}
	if d <= 0 {
		return errors.New("must be above zero")
	}
	*p.d = d
	return nil
}
