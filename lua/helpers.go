package lua

import (
	"fmt"
	"regexp"
	"strings"
)

// Helpers: lib.lua is a list of top-level declarations, `local function name(...)` through
// the `end` in column 0 that closes it (or on one line), or a one-line `local name = value`.
// A script carries those its body uses, and those they use in turn, in lib.lua's order (a
// declaration comes after the helpers it uses there). The comments above a declaration stay
// in lib.lua: they document it, and Redis has no use for them. Package lua's tests compile
// every script and fail on any name a script uses that it does not declare.

// A helper is one declaration of lib.lua.
type helper struct {
	name string
	text string          // its lines, from `local` on, each ending in a newline
	uses map[string]bool // the other helpers it names
}

var (
	declFunc  = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	declConst = regexp.MustCompile(`^local ([A-Za-z_][A-Za-z0-9_]*)\s*=\s*\S`)
)

// helpers are lib.lua's declarations, in order.
var helpers = mustParseLib(lib)

func mustParseLib(src string) []helper {
	hs, err := parseLib(src)
	if err != nil {
		panic("lua: lib.lua: " + err.Error())
	}
	return hs
}

// parseLib splits src, lib.lua, into its declarations. Anything else at the top level but
// comments and blank lines is an error: it would be in no script.
func parseLib(src string) ([]helper, error) {
	if !strings.HasSuffix(src, "\n") {
		src += "\n"
	}
	lines := strings.SplitAfter(src, "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	var hs []helper
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "--") {
			continue
		}
		var name string
		end := i // the declaration's last line
		if m := declFunc.FindStringSubmatch(line); m != nil {
			name = m[1]
			if !strings.HasSuffix(strings.TrimSpace(line), " end") { // not all on its line
				for end = i + 1; end < len(lines) && strings.TrimRight(lines[end], "\r\n") != "end"; end++ {
				}
			}
			if end == len(lines) {
				return nil, fmt.Errorf("line %d: function %s has no `end` in column 0", i+1, name)
			}
		} else if m := declConst.FindStringSubmatch(line); m != nil {
			name = m[1]
			if i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" && !strings.HasPrefix(lines[i+1], "--") &&
				!strings.HasPrefix(lines[i+1], "local ") {
				return nil, fmt.Errorf("line %d: %s: a constant must fit on its line", i+1, name)
			}
		} else {
			return nil, fmt.Errorf("line %d: %q is neither a `local function` nor a one-line `local` constant", i+1, line)
		}
		if seen[name] {
			return nil, fmt.Errorf("line %d: %s declared twice", i+1, name)
		}
		seen[name] = true
		hs = append(hs, helper{name: name, text: strings.Join(lines[i:end+1], "")})
		i = end
	}
	for i := range hs {
		hs[i].uses = map[string]bool{}
		for id := range names(hs[i].text) {
			if seen[id] && id != hs[i].name {
				hs[i].uses[id] = true
			}
		}
	}
	return hs, nil
}

// withHelpers is body preceded by the helpers it needs (see needs).
func withHelpers(body string) string {
	var b strings.Builder
	for _, h := range needs(body) {
		b.WriteString(h.text)
	}
	b.WriteString(body)
	return b.String()
}

// needs are the helpers body uses, directly or through other helpers, in lib.lua's order.
func needs(body string) []helper {
	need := map[string]bool{}
	var todo []string
	for id := range names(body) {
		todo = append(todo, id)
	}
	byName := make(map[string]*helper, len(helpers))
	for i := range helpers {
		byName[helpers[i].name] = &helpers[i]
	}
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		h := byName[id]
		if h == nil || need[id] {
			continue
		}
		need[id] = true
		for u := range h.uses {
			todo = append(todo, u)
		}
	}
	var out []helper
	for _, h := range helpers {
		if need[h.name] {
			out = append(out, h)
		}
	}
	return out
}

// names are the names code uses as variables: its identifiers outside comments and strings,
// but for fields (t.name, t:name). Keywords and locals are among them: only those that are
// helpers' names matter.
func names(code string) map[string]bool {
	out := map[string]bool{}
	// prev are the last two bytes of the code before i, comments, strings and spaces left
	// out, as isField reads them.
	var prev [2]byte
	push := func(c byte) { prev[0], prev[1] = prev[1], c }
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case strings.HasPrefix(code[i:], "--"):
			i += 2
			if n := longBracket(code[i:]); n > 0 {
				i = skipLong(code, i, n)
			} else if j := strings.IndexByte(code[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(code)
			}
		case c == '\'' || c == '"':
			for i++; i < len(code) && code[i] != c; i++ {
				if code[i] == '\\' {
					i++
				}
			}
			i++
			push(c)
		case c == '[' && longBracket(code[i:]) > 0:
			i = skipLong(code, i, longBracket(code[i:]))
			push(']')
		case isIdentStart(c):
			j := i
			for j < len(code) && (isIdentStart(code[j]) || code[j] >= '0' && code[j] <= '9') {
				j++
			}
			if !isField(prev) {
				out[code[i:j]] = true
			}
			push('a')
			i = j
		case c >= '0' && c <= '9': // a number, 0x1f or 1e5 included
			for i < len(code) && (isIdentStart(code[i]) || code[i] >= '0' && code[i] <= '9') {
				i++
			}
			push('0')
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		default:
			push(c)
			i++
		}
	}
	return out
}

// longBracket is the length of the long bracket that opens s ([[, [=[, ...), or 0.
func longBracket(s string) int {
	if !strings.HasPrefix(s, "[") {
		return 0
	}
	n := 1
	for n < len(s) && s[n] == '=' {
		n++
	}
	if n < len(s) && s[n] == '[' {
		return n + 1
	}
	return 0
}

// skipLong is the index past the long string or comment whose opening bracket, n bytes,
// starts at code[i].
func skipLong(code string, i, n int) int {
	closing := "]" + strings.Repeat("=", n-2) + "]"
	if j := strings.Index(code[i+n:], closing); j >= 0 {
		return i + n + j + len(closing)
	}
	return len(code)
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isField reports whether an identifier after prev, the last two bytes of the code before
// it (comments, strings and spaces left out), names a field: t.name or t:name, but not
// a..name (a concatenation) or a label (::name::).
func isField(prev [2]byte) bool {
	return (prev[1] == '.' || prev[1] == ':') && prev[0] != prev[1]
}
