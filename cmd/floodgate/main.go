// Command floodgate is the rate limit service and its command line; see
// "floodgate help" and docs/operations.md.
package main

import (
	"os"

	"github.com/floodgatehq/floodgate/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
