package redisstore

import "github.com/floodgatehq/floodgate"

// ScriptSHAs returns the SHA-1 of every script, for checks that scripts are
// loaded on every node.
func ScriptSHAs() []string {
	var out []string
	for _, a := range floodgate.Algorithms() {
		out = append(out, scripts[a].sha)
	}
	return out
}
