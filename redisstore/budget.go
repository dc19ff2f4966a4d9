package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// Budgets reports true: the store decides groups, partial grants,
// reservations, settles, refunds and calendar windows
// (storekit.BudgetStore), each in one function call (group.lua) on one
// slot.
func (s *Store) Budgets() bool { return true }

// budgetOp reports whether req needs group.lua: a group, a budget
// operation or a calendar window.
func budgetOp(req *floodgate.Request) bool {
	return req.Group != nil || req.AtMost || req.Refund || req.Reserve != nil || req.Settle != nil ||
		req.Policy.Align == calendar
}

const calendar floodgate.Align = "calendar"

// takeBudget decides a checked request that budgetOp accepts with one call
// of group.lua over every member's keys. On a Cluster, the members' keys
// must share a slot: a group whose keys do not is refused, before
// anything is decided, with an error wrapping storekit.ErrCrossSlot. A
// call a server refuses before it runs is sent again until *until (see
// tryAgain).
func (s *Store) takeBudget(ctx context.Context, req *floodgate.Request, until *time.Time) (floodgate.Decision, error) {
	if err := s.counterRefused(req); err != nil {
		return floodgate.Decision{}, err
	}
	if req.Refund && req.Group == nil && s.counts(req.Policy) {
		pr, err := s.prepare(req.Policy)
		if err != nil {
			return floodgate.Decision{}, err
		}
		return s.refundCounter(ctx, pr, req, until)
	}
	members := len(req.Group) + 1
	preps := make([]*prepared, members)
	var keys []string
	args := make([]any, 0, 1+2*members)
	now := "-"
	var clockNow int64
	if s.clock != nil {
		clockNow = s.clock.Now().UnixMicro()
		now = strconv.FormatInt(clockNow, 10)
	} else {
		clockNow = time.Now().UnixMicro()
	}
	op := "add"
	switch {
	case req.AtMost && req.Peek:
		op = "peekatmost"
	case req.AtMost:
		op = "atmost"
	case req.Peek:
		op = "peek"
	case req.Reserve != nil:
		op = "reserve"
	case req.Settle != nil:
		op = "settle"
	case req.Refund:
		op = "refund"
	}
	args = append(args, op+" "+strconv.FormatInt(req.N, 10)+" "+now)
	slot := -1
	for i := 0; i < members; i++ {
		p, key := req.Policy, req.Key
		if i > 0 {
			p, key = req.Group[i-1].Policy, req.Group[i-1].Key
		}
		pr, err := s.prepare(p)
		if err != nil {
			if i > 0 {
				return floodgate.Decision{}, fmt.Errorf("group member %d: %w", i, err)
			}
			return floodgate.Decision{}, err
		}
		preps[i] = pr
		ks := s.keys(p, pr, key, false)
		if s.sharded {
			if sl := keySlot(ks[0]); slot < 0 {
				slot = sl
			} else if sl != slot {
				return floodgate.Decision{}, fmt.Errorf("redisstore: group member %d is on another slot than member 0: %w", i, storekit.ErrCrossSlot)
			}
		}
		keys = append(keys, ks...)
		var b [4]int64
		if p.Align == calendar {
			if b, err = storekit.CalendarBounds(p, clockNow); err != nil {
				return floodgate.Decision{}, err
			}
		}
		var h [storekit.HoldWords]int64
		if r := req.Settle; r != nil {
			copy(h[:], r.Holds[storekit.HoldWords*i:])
		}
		var x strings.Builder
		if p.Align == calendar || req.Settle != nil {
			for j, v := range append(b[:], h[:]...) {
				if j > 0 {
					x.WriteByte(' ')
				}
				x.WriteString(strconv.FormatInt(v, 10))
			}
		}
		args = append(args, pr.params, x.String())
	}
	c := &call{kind: fcall, name: library.group, src: groupScript.src, keys: keys, args: args}
	if s.scriptsOnly.Load() {
		c.kind, c.name = evalSha, groupScript.sha
	}
	if err := s.runCall(ctx, c, until); err != nil {
		return floodgate.Decision{}, err
	}
	return s.decodeBudget(c.reply, req, preps)
}

// decodeBudget reads group.lua's reply: {allowed, remaining, retry_after,
// reset_after, member, its binding limit, granted}, then for an allowed
// reserve four numbers per member (at, born, tq, tr), which it writes to
// *req.Reserve with the rest of the reservation.
func (s *Store) decodeBudget(reply any, req *floodgate.Request, preps []*prepared) (floodgate.Decision, error) {
	r, ok := reply.([]any)
	if !ok || len(r) < 7 {
		return floodgate.Decision{}, malformed(reply)
	}
	n := make([]int64, len(r))
	for i, v := range r {
		x, ok := v.(int64)
		if !ok {
			return floodgate.Decision{}, malformed(reply)
		}
		n[i] = x
	}
	allowed, member, binding := n[0] == 1, n[4], n[5]
	members := int64(len(preps))
	holds := req.Reserve != nil && allowed
	switch {
	case n[0] < 0 || n[0] > 1 || n[1] < 0 || n[2] < -1 || n[3] < 0 || allowed != (n[2] == 0),
		member < 0 || member >= members || binding < 0 || binding >= int64(len(preps[member].limits)),
		n[6] < 0 || n[6] > req.N,
		holds && int64(len(n)) != 7+storekit.HoldWords*members,
		!holds && len(n) != 7:
		return floodgate.Decision{}, malformed(reply)
	}
	d := floodgate.Decision{
		Allowed:    allowed,
		Limit:      preps[member].limits[binding],
		Remaining:  n[1],
		RetryAfter: time.Duration(n[2]) * time.Microsecond,
		ResetAfter: time.Duration(n[3]) * time.Microsecond,
		Binding:    storekit.FlatBinding(req, int(member), int32(binding)),
		Granted:    n[6],
	}
	if n[2] == -1 {
		d.RetryAfter = floodgate.Never
	}
	if rs := req.Reserve; rs != nil {
		rs.Decision, rs.Key, rs.N = d, req.Key, req.N
		rs.Names = make([]string, members)
		rs.GroupKeys = make([]string, members-1)
		rs.Holds = make([]int64, storekit.HoldWords*members)
		rs.Names[0] = req.Policy.Name
		for i := range req.Group {
			rs.Names[i+1], rs.GroupKeys[i] = req.Group[i].Policy.Name, req.Group[i].Key
		}
		if holds {
			copy(rs.Holds, n[7:])
		}
	}
	return d, nil
}

// keySlot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first "{" and the next "}", when not
// empty), else of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Interface guard.
var _ storekit.BudgetStore = (*Store)(nil)
