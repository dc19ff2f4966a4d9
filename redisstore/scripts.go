package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// The Lua twins of internal/algo, one file per algorithm, each run after
// the shared prelude lua/common.lua and the preludes it alone needs. Each
// file's header lists its KEYS, ARGV (with units) and reply.
//
//go:embed lua/*.lua
var luaFS embed.FS

// preludes are the files an algorithm's script needs between common.lua
// and its own. Lua defines a script's functions anew on every call, so a
// script carries only those it uses.
var preludes = map[string][]string{
	"sliding_window": {"lists"},
	"sliding_log":    {"lists"},
	"gcra":           {"compact"},
	"fixed_window":   {"compact"},
}

// script is one assembled script: the preludes and an algorithm's file.
type script struct {
	name string // the algorithm's file, for errors
	src  string
	sha  string // SHA-1 of src, as EVALSHA wants it
}

func loadScript(name string) *script {
	var src []byte
	for _, part := range append(append([]string{"common"}, preludes[name]...), name) {
		b, err := luaFS.ReadFile("lua/" + part + ".lua")
		if err != nil {
			panic(err) // embedded at build time
		}
		if len(src) > 0 {
			src = append(src, '\n')
		}
		src = append(src, b...)
	}
	sum := sha1.Sum(src)
	return &script{name: name, src: string(src), sha: hex.EncodeToString(sum[:])}
}

// scripts holds the script of every algorithm, by floodgate.Algorithm.
var scripts = func() map[floodgate.Algorithm]*script {
	m := make(map[floodgate.Algorithm]*script)
	for _, a := range storekit.Algorithms() {
		m[a] = loadScript(string(a))
	}
	return m
}()

func scriptFor(a floodgate.Algorithm) (*script, error) {
	s, ok := scripts[a]
	if !ok {
		return nil, fmt.Errorf("%w: no script for algorithm %s", floodgate.ErrInvalidPolicy, a)
	}
	return s, nil
}
