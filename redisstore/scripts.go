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
// call runs. Each file's header lists its keys, its parameters (with units)
// and its state.
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

// library is the function library (Redis ≥ 7.0): every file once, then a
// decide and a peek function per algorithm. Its name and its functions'
// names carry a digest of its source, so that two versions of floodgate
// sharing one Redis each find their own (function names are global to a
// server).
var library = func() (lib struct {
	name, src string
	fns       map[floodgate.Algorithm][2]string // decide, peek
	group     string                            // every other operation (group.lua)
}) {
	var body strings.Builder
	body.WriteString(luaFile("common"))
	body.WriteString("\n" + luaFile("lists"))
	for _, a := range storekit.Algorithms() {
		body.WriteString("\n" + luaFile(string(a)))
	}
	sum := sha256.Sum256([]byte(body.String()))
	digest := hex.EncodeToString(sum[:6])
	lib.name = "floodgate_" + digest
	body.WriteString("\n" + luaFile("group"))
	lib.fns = make(map[floodgate.Algorithm][2]string)
	var reg strings.Builder
	lib.group = "fg_" + digest + "_group"
	fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=group_entry}\n", lib.group)
	for _, a := range storekit.Algorithms() {
		decide, peek := "fg_"+digest+"_"+string(a), "fg_"+digest+"_"+string(a)+"_ro"
		lib.fns[a] = [2]string{decide, peek}
		fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=entry(%s_parse, %[2]s_decide, false)}\n", decide, a)
		fmt.Fprintf(&reg, "redis.register_function{function_name='%s', callback=entry(%s_parse, %[2]s_decide, true), flags={'no-writes'}}\n", peek, a)
	}
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

// scripts holds the scripts of every algorithm, deciding [0] and peeking
// [1].
var scripts = func() map[floodgate.Algorithm][2]*script {
	m := make(map[floodgate.Algorithm][2]*script)
	for _, a := range storekit.Algorithms() {
		m[a] = [2]*script{newScript(a, false), newScript(a, true)}
	}
	return m
}()
