package floodgatetest

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// The project's own vectors: the sections SPEC.md gained after the
// baseline (atomic groups, reserve/settle/refund, partial grants, calendar
// windows), in SPEC.md's extended vector format.
//
//go:embed testdata/project/*.json
var projectFS embed.FS

// ProjectVector is one vector of the project's own set: a policy or a group
// of member policies, and steps replayed from empty state (SPEC.md, "The
// project's vectors").
type ProjectVector struct {
	Name   string
	Source string

	// Group reports that the vector decides a group: Members are its
	// members in order. Otherwise Members holds the one policy.
	Group   bool
	Members []Member

	Steps []ProjectStep

	// File is the file the vector was read from.
	File string
}

// Member is one policy of a project vector. For a calendar window (SPEC.md,
// "Calendar windows": a FixedWindow policy with Align "calendar") Calendar
// holds its period and loaded zone too, for replays on the twin.
type Member struct {
	Policy   floodgate.Policy
	Calendar *Calendar
}

// Calendar is a fixed_window's calendar alignment.
type Calendar struct {
	// Period is "day", "week" (ISO, from Monday) or "month".
	Period string
	// TZ is an IANA time zone name; the loader sets "UTC" when the vector
	// names none.
	TZ string
	// Location is TZ loaded.
	Location *time.Location
}

// ProjectStep is one operation of a project vector.
type ProjectStep struct {
	// At is the step's time in µs since the Unix epoch: BaseMicros plus
	// at_us, or the absolute instant of at.
	At int64

	// Keys holds one key per member (every member's key for a vector's
	// "key"); empty for settle, which uses its reservation's keys.
	Keys []string

	// Op is add, peek, reset, add_at_most, peek_at_most, reserve, settle or
	// refund.
	Op string

	// N is the cost (1 when absent); ID names a reservation (reserve,
	// settle); Used is what a settle used.
	N    int64
	ID   string
	Used int64

	Expect *ProjectExpect

	// The usage queries (ops series and list, SPEC.md "Per-key usage
	// series"): From and To in µs since the Unix epoch (nil: the query's
	// default), Step; Sort, Order, Window and Limit (the page size) as the
	// vector gives them.
	From, To    *int64
	Step        time.Duration
	Sort, Order string
	Window      time.Duration
	Limit       int
}

// ProjectExpect is Expect with the fields of the new sections.
type ProjectExpect struct {
	Expect
	Granted *int64 `json:"granted,omitempty"`
	Member  *int32 `json:"member,omitempty"`

	// Series is what a series query returns; Keys every page of a
	// listing, in order; Error the parameter a query's error names.
	Series *SeriesExpect `json:"series,omitempty"`
	Keys   *[]KeyExpect  `json:"keys,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// SeriesExpect is a summarized series: points as [t_us, requests,
// denied], times as offsets from BaseMicros.
type SeriesExpect struct {
	Points   [][3]int64  `json:"points"`
	Requests StatsExpect `json:"requests"`
	Denied   StatsExpect `json:"denied"`
}

// StatsExpect is the summary of one count; PeakAtUS is absent when there
// is no peak.
type StatsExpect struct {
	Sum      int64   `json:"sum"`
	Mean     float64 `json:"mean"`
	Peak     int64   `json:"peak"`
	PeakAtUS *int64  `json:"peak_at_us,omitempty"`
}

// KeyExpect is one listed key; times are offsets from BaseMicros, and the
// window's sums are checked when present.
type KeyExpect struct {
	Key            string `json:"key"`
	Requests       int64  `json:"requests"`
	Denied         int64  `json:"denied"`
	FirstSeenUS    int64  `json:"first_seen_us"`
	LastSeenUS     int64  `json:"last_seen_us"`
	WindowRequests *int64 `json:"window_requests,omitempty"`
	WindowDenied   *int64 `json:"window_denied,omitempty"`
}

// ProjectVectors returns the project's own vectors embedded in this
// package, files in name order.
func ProjectVectors() ([]ProjectVector, error) {
	sub, err := fs.Sub(projectFS, "testdata/project")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(sub, "*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var all []ProjectVector
	for _, name := range names {
		data, err := fs.ReadFile(sub, name)
		if err != nil {
			return nil, err
		}
		vs, err := ParseProjectVectors(data, name)
		if err != nil {
			return nil, err
		}
		all = append(all, vs...)
	}
	return all, nil
}

type projectVectorJSON struct {
	Name   string            `json:"name"`
	Source string            `json:"source"`
	Policy json.RawMessage   `json:"policy"`
	Group  []json.RawMessage `json:"group"`
	Steps  []projectStepJSON `json:"steps"`
}

type projectStepJSON struct {
	AtUS   *int64         `json:"at_us"`
	At     string         `json:"at"`
	Key    string         `json:"key"`
	Keys   []string       `json:"keys"`
	Op     string         `json:"op"`
	N      *int64         `json:"n"`
	ID     string         `json:"id"`
	Used   *int64         `json:"used"`
	Expect *ProjectExpect `json:"expect"`

	FromUS *int64 `json:"from_us"`
	ToUS   *int64 `json:"to_us"`
	Step   string `json:"step"`
	Sort   string `json:"sort"`
	Order  string `json:"order"`
	Window string `json:"window"`
	Limit  int    `json:"limit"`
}

// ParseProjectVectors decodes a file of the project's vectors (a JSON array
// of vectors) and checks it: valid policies, a known op on every step, keys
// for every member, costs of at least 1, reservations named once and
// settled only after they were made, and one time form per vector.
func ParseProjectVectors(data []byte, file string) ([]ProjectVector, error) {
	var raw []projectVectorJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out := make([]ProjectVector, 0, len(raw))
	for _, r := range raw {
		v := ProjectVector{Name: r.Name, Source: r.Source, File: filepath.Base(file)}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s: vector %s: %s", file, r.Name, fmt.Sprintf(format, args...))
		}
		switch {
		case len(r.Policy) > 0 && len(r.Group) > 0:
			return nil, fail("both policy and group")
		case len(r.Policy) > 0:
			r.Group = []json.RawMessage{r.Policy}
		case len(r.Group) > 0:
			v.Group = true
		default:
			return nil, fail("no policy and no group")
		}
		if len(r.Group) > storekit.MaxLimits {
			return nil, fail("%d members, want at most %d", len(r.Group), storekit.MaxLimits)
		}
		for i, pj := range r.Group {
			m, err := parseMember(pj)
			if err != nil {
				return nil, fail("member %d: %v", i, err)
			}
			v.Members = append(v.Members, m)
		}
		if len(r.Steps) == 0 {
			return nil, fail("no steps")
		}
		ids := map[string]bool{}
		absolute := r.Steps[0].At != ""
		for j, s := range r.Steps {
			fail := func(format string, args ...any) error {
				return fmt.Errorf("%s: vector %s step %d: %s", file, r.Name, j, fmt.Sprintf(format, args...))
			}
			step := ProjectStep{Op: s.Op, N: 1, ID: s.ID, Expect: s.Expect}
			switch {
			case (s.At != "") != absolute || s.At != "" && s.AtUS != nil:
				return nil, fail("a vector uses either at_us or at in every step")
			case s.At != "":
				t, err := time.Parse(time.RFC3339Nano, s.At)
				if err != nil {
					return nil, fail("at: %v", err)
				}
				step.At = t.UnixMicro()
			case s.AtUS != nil:
				step.At = BaseMicros + *s.AtUS
			default:
				return nil, fail("no at_us or at")
			}
			if s.N != nil {
				step.N = *s.N
			}
			switch s.Op {
			case "add", "peek", "add_at_most", "peek_at_most", "reserve", "refund", "reset":
				if step.N < 1 || step.N > floodgate.MaxCost {
					return nil, fail("n = %d, want 1 to 2^53-1", step.N)
				}
				switch {
				case s.Key != "" && len(s.Keys) > 0:
					return nil, fail("both key and keys")
				case s.Key != "":
					for range v.Members {
						step.Keys = append(step.Keys, s.Key)
					}
				case len(s.Keys) == len(v.Members):
					step.Keys = s.Keys
				default:
					return nil, fail("want key, or keys with one key per member")
				}
				for _, k := range step.Keys {
					if k == "" {
						return nil, fail("empty key")
					}
				}
				if s.Op == "reserve" {
					if s.ID == "" || ids[s.ID] {
						return nil, fail("reserve needs an id used by no other reserve of the vector")
					}
					ids[s.ID] = true
				}
			case "series", "list":
				if v.Group {
					return nil, fail("%s: usage queries name one policy, not a group", s.Op)
				}
				if s.Key == "" || len(s.Keys) > 0 {
					return nil, fail("%s: want key", s.Op)
				}
				step.Keys = []string{s.Key}
				base := BaseMicros
				if absolute {
					base = 0
				}
				if s.FromUS != nil {
					step.From = new(base + *s.FromUS)
				}
				if s.ToUS != nil {
					step.To = new(base + *s.ToUS)
				}
				for _, d := range []struct {
					name, s string
					dst     *time.Duration
				}{{"step", s.Step, &step.Step}, {"window", s.Window, &step.Window}} {
					if d.s == "" {
						continue
					}
					var err error
					if *d.dst, err = time.ParseDuration(d.s); err != nil {
						return nil, fail("%s: %v", d.name, err)
					}
				}
				step.Sort, step.Order, step.Limit = s.Sort, s.Order, s.Limit
				if s.Expect == nil || (s.Op == "series") != (s.Expect.Series != nil) && s.Expect.Error == "" ||
					(s.Op == "list") != (s.Expect.Keys != nil) && s.Expect.Error == "" {
					return nil, fail("%s: want expect with %s, or error", s.Op, map[string]string{"series": "series", "list": "keys"}[s.Op])
				}
			case "settle":
				if !ids[s.ID] {
					return nil, fail("settle of %q, which no earlier reserve made", s.ID)
				}
				if s.Used == nil || *s.Used < 0 {
					return nil, fail("settle needs used ≥ 0")
				}
				step.Used = *s.Used
			default:
				return nil, fail("op %q, want add, peek, reset, add_at_most, peek_at_most, reserve, settle, refund, series or list", s.Op)
			}
			v.Steps = append(v.Steps, step)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseMember decodes one policy in SPEC.md's JSON form, calendar windows
// included, and checks it.
func parseMember(data json.RawMessage) (Member, error) {
	var m Member
	if err := json.Unmarshal(data, &m.Policy); err != nil {
		return Member{}, err
	}
	p := m.Policy
	p.Name = "vector"
	if err := p.Validate(); err != nil {
		return Member{}, err
	}
	if p.Align == "calendar" {
		c := Calendar{Period: p.Period, TZ: p.TZ}
		if c.TZ == "" {
			c.TZ = "UTC"
		}
		loc, err := time.LoadLocation(c.TZ)
		if err != nil {
			return Member{}, fmt.Errorf("tz %q: %w", c.TZ, err)
		}
		c.Location = loc
		m.Calendar = &c
	}
	return m, nil
}

// unmarshalField decodes fields[name] into v when present.
func unmarshalField(fields map[string]json.RawMessage, name string, v any) error {
	raw, ok := fields[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
