package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"

	"github.com/floodgatehq/floodgate"
)

// The Lua twins of internal/algo, one file per algorithm, each run after
// the shared prelude lua/common.lua. Each file's header lists its KEYS,
// ARGV (with units) and reply.
//
//go:embed lua/*.lua
var luaFS embed.FS

// script is one assembled script: the prelude and an algorithm's file.
type script struct {
	name string // the algorithm's file, for errors
	src  string
	sha  string // SHA-1 of src, as EVALSHA wants it
}

func loadScript(name string) *script {
	common, err := luaFS.ReadFile("lua/common.lua")
	if err != nil {
		panic(err) // embedded at build time
	}
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	src := string(common) + "\n" + string(body)
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// scripts holds the script of every algorithm, by floodgate.Algorithm.
var scripts = func() map[floodgate.Algorithm]*script {
	m := make(map[floodgate.Algorithm]*script)
	for _, a := range floodgate.Algorithms() {
		m[a] = loadScript(a.String())
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
