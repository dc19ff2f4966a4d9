package redisstore

import (
	"crypto/sha1"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// The Lua twins of internal/algo: common.lua (what every algorithm
// shares), lists.lua (the lists of sliding_window and sliding_log) and
// one file per algorithm, each defining <algorithm>_parse and
// <algorithm>_decide, which common.lua's entry turns into the function a
// call runs; group.lua (groups and budgets) and batch.lua (TakeBatch's
// many decisions in one call) only build on them; counter.lua (a refund
// to a counter, WithCounters) stands alone. Each file's header
// lists its keys, its parameters (with units) and its state.
//
//go:embed lua/*.lua
var luaFS embed.FS

// preludes are the files an algorithm needs between common.lua and its
// own.
var preludes = map[floodgate.Algorithm][]string{
	floodgate.SlidingWindow: {"lists"},
	floodgate.SlidingLog:    {"lists"},
}

func luaFile(name string) string {
	b, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

// tags are the algorithms' tags: the first field of a policy's parameter
// string (args[1]), and the key of its deciding function in batch.lua
// (the tag and "p", its peeking function).
var tags = map[floodgate.Algorithm]string{
	floodgate.FixedWindow:   "fw",
	floodgate.GCRA:          "gc",
	floodgate.TokenBucket:   "tb",
	floodgate.AR1:           "ar",
	floodgate.SlidingWindow: "sw",
	floodgate.SlidingLog:    "sl",
}

// library is the function library (Redis ≥ 7.0): every file once, then a
// decide and a peek function per algorithm, the group function, and the
// batch function deciding many calls of any algorithms (batch.lua). Its
// name and its functions' names carry a digest of its source, so that two
// versions of floodgate sharing one Redis each find their own (function
// names are global to a server).
var library = func() (lib struct {
	name, src string
	fns       map[floodgate.Algorithm][2]string // decide, peek
	group     string                            // every other operation (group.lua)
	batch     string                            // many decisions (batch.lua)
	refund    string                            // a refund to a counter (counter.lua)
}) {
	var body strings.Builder
	body.WriteString(luaFile("common"))
	body.WriteString("\n" + luaFile("lists"))
	for _, a := range storekit.Algorithms() {
		body.WriteString("\n" + luaFile(string(a)))
	}
	body.WriteString("\n" + luaFile("group"))
	body.WriteString("\n" + luaFile("batch"))
	body.WriteString("\n" + luaFile("counter"))
	sum := sha256.Sum256([]byte(body.String()))
	digest := hex.EncodeToString(sum[:6])
	lib.name = "floodgate_" + digest
	lib.fns = make(map[floodgate.Algorithm][2]string)
	var reg strings.Builder
	lib.group = "fg_" + digest + "_group"
	lib.batch = "fg_" + digest + "_batch"
	lib.refund = "fg_" + digest + "_counter_refund"
	fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=counter_refund}\n", lib.refund)
	fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=group_entry}\n", lib.group)
	reg.WriteString("local fns = {}\n")
	for _, a := range storekit.Algorithms() {
		decide, peek := "fg_"+digest+"_"+string(a), "fg_"+digest+"_"+string(a)+"_ro"
		lib.fns[a] = [2]string{decide, peek}
		fmt.Fprintf(&reg, "fns.%s = entry(%s_parse, %[2]s_decide, false)\n", tags[a], a)
		fmt.Fprintf(&reg, "fns.%sp = entry(%s_parse, %[2]s_decide, true)\n", tags[a], a)
		fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=fns.%s}\n", decide, tags[a])
		fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=fns.%sp, flags={'no-writes'}}\n", peek, tags[a])
	}
	fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=batch(fns)}\n", lib.batch)
	lib.src = "#!lua name=" + lib.name + "\n" + body.String() + "\n" + reg.String()
	return lib
}()

// script is one script of the EVALSHA path (servers without functions):
// common.lua, the algorithm's preludes and file, and the call of its
// function, deciding or peeking.
type script struct {
	src string
	sha string // SHA-1 of src, as EVALSHA wants it
}

func newScript(a floodgate.Algorithm, peek bool) *script {
	parts := []string{luaFile("common")}
	for _, p := range preludes[a] {
		parts = append(parts, luaFile(p))
	}
	parts = append(parts, luaFile(string(a)), fmt.Sprintf("return entry(%s_parse, %[1]s_decide, %v)(KEYS, ARGV)\n", a, peek))
	src := strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// groupScript is the script of group.lua on servers without functions:
// every file, then the call of group_entry.
var groupScript = func() *script {
	parts := []string{luaFile("common"), luaFile("lists")}
	for _, a := range storekit.Algorithms() {
		parts = append(parts, luaFile(string(a)))
	}
	parts = append(parts, luaFile("group"), "return group_entry(KEYS, ARGV)\n")
	src := strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}()

// counterScript is the script of counter.lua on servers without
// functions, and what a refund to a counter is sent again as when its
// function is missing.
var counterScript = func() *script {
	src := luaFile("counter") + "\nreturn counter_refund(KEYS, ARGV)\n"
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}()

// scripts holds the scripts of every algorithm, deciding [0] and peeking
// [1].
var scripts = func() map[floodgate.Algorithm][2]*script {
	m := make(map[floodgate.Algorithm][2]*script)
	for _, a := range storekit.Algorithms() {
		m[a] = [2]*script{newScript(a, false), newScript(a, true)}
	}
	return m
}()
