package thirdparty

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	apache, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	const mit = `Copyright (c) 2020 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files (the "Software"), to deal in the Software without restriction, including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
`
	const gpl = `This program is free software: you can redistribute it and/or modify
it under the terms of the GNU General Public License as published by
the Free Software Foundation, either version 3 of the License, or
(at your option) any later version.

This program is distributed in the hope that it will be useful,
but WITHOUT ANY WARRANTY; without even the implied warranty of
MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
GNU General Public License for more details.

You should have received a copy of the GNU General Public License
along with this program.  If not, see <https://www.gnu.org/licenses/>.
`
	for _, c := range []struct {
		name, text string
		want       string // the identifiers, comma separated; "" for a refusal
	}{
		{"floodgate's LICENSE", string(apache), "Apache-2.0"},
		{"MIT", mit, "MIT"},
		{"GPL-3.0 notice", gpl, ""},
		{"home-made terms", "You may use this software on Tuesdays only.\n", ""},
		{"MIT with extra terms", mit + strings.Repeat("The licensee must also send the author a postcard from every city it runs in.\n", 20), ""},
	} {
		ids, err := Classify([]byte(c.text))
		if c.want == "" {
			if !errors.Is(err, ErrNotPermissive) {
				t.Errorf("%s: Classify = %v, %v; want ErrNotPermissive", c.name, ids, err)
			}
			continue
		}
		if err != nil || strings.Join(ids, ",") != c.want {
			t.Errorf("%s: Classify = %v, %v; want %s", c.name, ids, err, c.want)
		}
	}
}

// TestFloodgateDependencies: every module the floodgate command links, on
// every platform make release builds, has a permissive license, and the
// notice lists each with its text.
func TestFloodgateDependencies(t *testing.T) {
	mods, err := FromPackages("../..", []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}, "./cmd/floodgate")
	if err != nil {
		t.Fatal(err)
	}
	if mods["google.golang.org/grpc"] == "" || mods["github.com/redis/go-redis/v9"] == "" {
		t.Fatalf("go list found %d modules, without grpc or go-redis: %v", len(mods), mods)
	}
	resolved, err := Resolve("../..", mods)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, "go1.26.8", "Go's license", resolved); err != nil {
		t.Fatal(err)
	}
	for _, m := range resolved {
		if !strings.Contains(b.String(), "| "+m.Path+" | "+m.Version+" | ") || !strings.Contains(b.String(), "\n## "+m.Path+" "+m.Version+" (") {
			t.Errorf("the notice lacks %s %s", m.Path, m.Version)
		}
	}
}
