package lua

import (
	"context"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// redisGlobals are the globals Redis gives a script (Lua 5.1's base library, the libraries
// it loads, and its own): every other name a script uses must be its own, or a helper's.
var redisGlobals = map[string]bool{
	"redis": true, "KEYS": true, "ARGV": true,
	"string": true, "math": true, "table": true, "bit": true, "cjson": true, "cmsgpack": true, "struct": true,
	"assert": true, "error": true, "ipairs": true, "next": true, "pairs": true, "pcall": true, "rawequal": true,
	"rawget": true, "rawset": true, "select": true, "tonumber": true, "tostring": true, "type": true,
	"unpack": true, "xpcall": true, "getmetatable": true, "setmetatable": true,
}

// globals are the global names src reads and writes, as Lua 5.1 compiles it: a helper a
// script lacks is one of them.
func globals(t *testing.T, name, src string) (read, written []string) {
	t.Helper()
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	proto, err := glua.Compile(chunk, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	seen := map[string]bool{}
	var walk func(p *glua.FunctionProto)
	walk = func(p *glua.FunctionProto) {
		for _, inst := range p.Code {
			op := int(inst >> 26) // gopher-lua's layout: opcode, A, then Bx in the low 18 bits
			if op != glua.OP_GETGLOBAL && op != glua.OP_SETGLOBAL {
				continue
			}
			g := p.Constants[inst&0x3ffff].String()
			if op == glua.OP_SETGLOBAL {
				written = append(written, g)
			} else if !seen[g] {
				seen[g] = true
				read = append(read, g)
			}
		}
		for _, f := range p.FunctionPrototypes {
			walk(f)
		}
	}
	walk(proto)
	sort.Strings(read)
	return read, written
}

// The globals check reads what it should: a global read or written, not a local, a field or
// a string.
func TestGlobals(t *testing.T) {
	read, written := globals(t, "probe", `
local function here(x) return x end
local t = { a = 1 }
g_set = here(t.a) .. 'quoted' .. g_read
local function later() return g_inner(here) end
return later`)
	if !slices.Equal(read, []string{"g_inner", "g_read"}) || !slices.Equal(written, []string{"g_set"}) {
		t.Fatalf("globals: read %v, written %v; want [g_inner g_read], [g_set]", read, written)
	}
}

// Every script declares every name it uses but Redis's globals: a helper it uses is in it,
// with the helpers that helper uses. And it carries no helper it does not use: without any
// one of them, a name goes undeclared.
func TestScriptsCarryTheirHelpers(t *testing.T) {
	if len(scripts) == 0 {
		t.Fatal("no scripts")
	}
	for _, s := range scripts {
		read, written := globals(t, s.file, s.src)
		if len(written) > 0 {
			t.Errorf("%s sets globals %v (Redis refuses it)", s.file, written)
		}
		for _, g := range read {
			if !redisGlobals[g] {
				t.Errorf("%s uses %s, which neither it nor its helpers declare, nor Redis", s.file, g)
			}
		}
		b := body(s.file)
		hs := needs(b)
		for i, h := range hs {
			var src strings.Builder
			for j, o := range hs {
				if j != i {
					src.WriteString(o.text)
				}
			}
			src.WriteString(b)
			if read, _ := globals(t, s.file, src.String()); !slices.Contains(read, h.name) {
				t.Errorf("%s carries helper %s, which it does not use", s.file, h.name)
			}
		}
	}
}

// Every .lua file but lib.lua is the body of one Script, and every helper is some script's.
func TestEveryFileAndHelperIsUsed(t *testing.T) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]int{}
	used := map[string]bool{}
	for _, s := range scripts {
		byFile[s.file]++
		for _, h := range needs(body(s.file)) {
			used[h.name] = true
		}
	}
	for _, e := range entries {
		if e.Name() != "lib.lua" && byFile[e.Name()] != 1 {
			t.Errorf("%s is the body of %d scripts, want 1", e.Name(), byFile[e.Name()])
		}
	}
	for _, h := range helpers {
		if !used[h.name] {
			t.Errorf("lib.lua's %s is in no script", h.name)
		}
	}
}

// Redis compiles every script, and knows it by the SHA it is run by.
func TestScriptsLoad(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range scripts {
			sha, err := c.Do(ctx, c.B().ScriptLoad().Script(s.src).Build()).ToString()
			if err != nil {
				t.Errorf("SCRIPT LOAD %s: %v", s.file, err)
			} else if sha != s.sha {
				t.Errorf("%s: SCRIPT LOAD gave SHA %s, the script runs by %s", s.file, sha, s.sha)
			}
		}
	})
}

// lib.lua's parser takes declarations and comments, and refuses anything else.
func TestParseLib(t *testing.T) {
	hs, err := parseLib(`-- header

-- a's doc
local function a(x)
    -- inside
    return x .. 'b(' -- b
end
local k = '1'
local function one(z) return z end
-- b's doc
local function b(y)

    return a(y) .. k .. c.a
end
`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		var uses []string
		for u := range h.uses {
			uses = append(uses, u)
		}
		sort.Strings(uses)
		got = append(got, h.name+":"+strings.Join(uses, ","))
	}
	if want := []string{"a:", "k:", "one:", "b:a,k"}; !slices.Equal(got, want) {
		t.Errorf("helpers %v, want %v", got, want)
	}
	if !strings.HasPrefix(hs[0].text, "local function a(x)\n") || !strings.HasSuffix(hs[0].text, "\nend\n") {
		t.Errorf("a's text %q: want its lines from local to end", hs[0].text)
	}
	for _, bad := range []string{
		"local function a()\n  return 1\n",    // no end
		"local x = 1\nlocal x = 2\n",          // twice
		"redis.call('del', KEYS[1])\n",        // top-level code
		"local t = {\n  1,\n}\n",              // a constant over lines
		"local a, b = 1, 2\n",                 // more than one name
		"local function a()\nend\nprint(1)\n", // code after a function
	} {
		if _, err := parseLib(bad); err == nil {
			t.Errorf("parseLib(%q) took it", bad)
		}
	}
}

// names finds the names code uses, outside comments, strings and fields.
func TestNames(t *testing.T) {
	got := names(`local x = a.b .. c:d() .. e..f -- g.
--[[ h ]] i = 'j' .. "k\"l" .. [[m]] .. [=[n]=] .. 0x1f .. 1e5 .. t. o -- p.
q()`)
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if want := []string{"a", "c", "e", "f", "i", "local", "q", "t", "x"}; !slices.Equal(ids, want) {
		t.Errorf("names %v, want %v", ids, want)
	}
}

// Every request type sends as many keys and arguments as its script reads: a contract that
// has drifted from its script fails here. Each request below sets every optional part; the
// renewals and permit lists are variadic (one element here), and are read in loops.
func TestRequestsMatchScripts(t *testing.T) {
	num := Numbered{Latch: "l", N: 1, LatchMs: "1"}
	wait := &Registration{Token: "t", Ms: "1", Others: true}
	one := []string{"x"}
	for _, r := range []struct {
		req     Request
		varKeys bool // keys read in a loop: not checked
		varArgs int  // arguments past the last one read by index
	}{
		{req: LockAcquire{Lock: "k", TokenKey: "t", Wait: wait}},
		{req: LockRelease{Numbered: num, Heir: "h"}},
		{req: LockForceRelease{}},
		{req: LockLeave{}},
		{req: LockRenew{Locks: one, Owners: one}, varKeys: true, varArgs: 1},
		{req: FairAcquire{}},
		{req: FairRelease{Numbered: num}},
		{req: FairForceRelease{}},
		{req: FairLeave{}},
		{req: ReadAcquire{}},
		{req: ReadRelease{Numbered: num}},
		{req: ReadRenew{Locks: one, Timeouts: one, Owners: one}, varKeys: true, varArgs: 1},
		{req: WriteAcquire{}},
		{req: WriteRelease{Numbered: num}},
		{req: WriteLeave{}},
		{req: SemAcquire{Numbered: num, Wait: wait}},
		{req: SemRelease{Numbered: num}},
		{req: SemSet{Numbered: num}},
		{req: SemLeave{}},
		{req: LatchRequest{Numbered: num}.Set(1)},
		{req: LatchRequest{Numbered: num}.CountDown()},
		{req: LatchRequest{Numbered: num}.Delete()},
		{req: PermitAcquire{Numbered: num, IDs: one}, varArgs: 1},
		{req: PermitRelease{Numbered: num, IDs: one}, varArgs: 1},
		{req: PermitSet{Numbered: num}},
		{req: PermitState{ID: "p", ExpiryMs: "1"}},
		{req: PermitRenew{Acquired: one, Permits: one}, varKeys: true, varArgs: 1},
	} {
		call := r.req.Call()
		code := codeOf(body(call.Script.file))
		keys, args := maxIndex(code, "KEYS"), maxIndex(code, "ARGV")
		if !r.varKeys && len(call.Keys) != keys {
			t.Errorf("%T sends %d keys; %s reads %d", r.req, len(call.Keys), call.Script.file, keys)
		}
		if len(call.Args) != args+r.varArgs {
			t.Errorf("%T sends %d arguments; %s reads %d, and %d more in a loop", r.req, len(call.Args), call.Script.file, args, r.varArgs)
		}
	}
}

// codeOf is src without its comment lines.
func codeOf(src string) string {
	var code strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			code.WriteString(line)
		}
	}
	return code.String()
}

// maxIndex is the highest literal index of table (KEYS, ARGV) that code reads.
func maxIndex(code, table string) int {
	n := 0
	for _, m := range regexp.MustCompile(table+`\[(\d+)\]`).FindAllStringSubmatch(code, -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	return n
}

// docs/acl.md lists, for each primitive, exactly the commands its scripts run: a command a
// script gained, or lost, fails here until the document says so.
func TestACLDocumentsScripts(t *testing.T) {
	doc, err := os.ReadFile("../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // primitive column → commands column
	for line := range strings.SplitSeq(string(doc), "\n") {
		if cells := strings.Split(line, "|"); len(cells) == 4 && strings.TrimSpace(cells[1]) != "primitive" && !strings.HasPrefix(cells[1], "-") {
			rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
		}
	}
	call := regexp.MustCompile(`redis\.call\('([a-z]+)'`)
	publish := regexp.MustCompile(`redis\.call\((publish|ARGV\[\d+\])`) // the publish command is an argument
	for primitive, scripts := range map[string][]*Script{
		"Lock, FencedLock, MultiLock, RedLock": {lockAcquire, lockRelease, lockForceRelease, lockLeave, lockRenew},
		"FairLock":                             {fairAcquire, fairRelease, fairForceRelease, fairLeave, lockRenew},
		"RWLock":                               {readAcquire, readRelease, readRenew, writeAcquire, writeRelease, writeLeave, lockRenew},
		"Semaphore":                            {semAcquire, semRelease, semSet, semLeave},
		"PermitSemaphore":                      {permitAcquire, permitRelease, permitSet, permitState, permitRenew},
		"CountDownLatch":                       {latchSet, latchCountDown, latchDelete},
	} {
		set := map[string]bool{}
		for _, s := range scripts {
			code := codeOf(s.src)
			for _, m := range call.FindAllStringSubmatch(code, -1) {
				set[m[1]] = true
			}
			set["publish"] = set["publish"] || publish.MatchString(code)
		}
		var want []string
		for c, ok := range set {
			if ok && c != "publish" {
				want = append(want, c)
			}
		}
		sort.Strings(want)
		if set["publish"] {
			want = append([]string{"publish"}, want...)
		}
		row, ok := rows[primitive]
		if !ok {
			t.Errorf("docs/acl.md has no row for %s", primitive)
			continue
		}
		if got := strings.Fields(row); !slices.Equal(got, want) {
			t.Errorf("docs/acl.md lists for %s:\n  %s\nits scripts run:\n  %s", primitive, row, strings.Join(want, " "))
		}
	}
}
