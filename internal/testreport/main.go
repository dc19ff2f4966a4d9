// Command testreport reads `go test -json` on standard input and prints a
// short report: one line per package, the whole output of every failed
// test, every skipped test with its reason, and the lines of passing tests
// that start with "conformance:" (the replay counts of the SPEC vectors).
// It exits with status 1 when anything failed. make test pipes into it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout))
}

func run(in io.Reader, out io.Writer) int {
	outputs := map[[2]string][]string{} // (package, test) -> output lines
	var notes []string                  // conformance lines of the current run
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(out, string(line)) // not an event: pass it on
			continue
		}
		id := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output", "build-output":
			outputs[id] = append(outputs[id], e.Output)
			if i := strings.Index(e.Output, "conformance:"); i >= 0 && e.Test != "" {
				notes = append(notes, "    "+strings.TrimSpace(e.Output[i:]))
			}
		case "build-fail":
			failed = true
			fmt.Fprint(out, strings.Join(outputs[id], ""))
		case "skip":
			if e.Test != "" {
				reason := lastMeaningful(outputs[id])
				fmt.Fprintf(out, "SKIP  %s %s: %s\n", e.Package, e.Test, reason)
			}
			delete(outputs, id)
		case "fail":
			failed = true
			fmt.Fprint(out, strings.Join(outputs[id], ""))
			delete(outputs, id)
			if e.Test == "" {
				fmt.Fprintf(out, "FAIL  %s %.2fs\n", e.Package, e.Elapsed)
			}
		case "pass":
			delete(outputs, id)
			if e.Test == "" {
				fmt.Fprintf(out, "ok    %s %.2fs\n", e.Package, e.Elapsed)
				for _, n := range notes {
					fmt.Fprintln(out, n)
				}
				notes = notes[:0]
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testreport:", err)
		return 1
	}
	if failed {
		fmt.Fprintln(out, "FAIL")
		return 1
	}
	return 0
}

// lastMeaningful returns the last output line that is not go test's own
// framing ("=== RUN", "--- SKIP").
func lastMeaningful(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "===") && !strings.HasPrefix(l, "---") {
			return l
		}
	}
	return "(no reason given)"
}
