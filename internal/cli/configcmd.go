package cli

import (
	"fmt"
	"strings"

	"github.com/floodgatehq/floodgate/config"
)

// configCmd prints what the configuration format is: "floodgate config
// defaults" prints every field at its default, with a comment on each
// (the file docs/operations.md embeds), and "floodgate config env" the
// environment variables every command reads.
func (e *environ) configCmd(args []string) int {
	fs := e.flags("config", "defaults|env",
		"Prints the configuration format's reference, generated from the code that reads it:\n"+
			"  defaults  a complete YAML file, every field at its default and commented\n"+
			"            (floodgate check accepts it; start your own file from it)\n"+
			"  env       the environment variables each command reads")
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return e.badUsage("config", "want one of defaults or env, found %q", strings.Join(fs.Args(), " "))
	}
	switch fs.Arg(0) {
	case "defaults":
		e.stdout.Write(config.DefaultsYAML())
	case "env":
		for _, v := range environment {
			fmt.Fprintf(e.stdout, "%s\n    \tused by %s: %s\n", v.name, strings.Join(v.cmds, ", "), v.doc)
		}
	default:
		return e.badUsage("config", "want one of defaults or env, found %q", fs.Arg(0))
	}
	return 0
}
