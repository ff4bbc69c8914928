package nemesis

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// The key-value model the histories are checked against: one register per
// key (the history is partitioned by key), a write whose outcome is
// unknown taking effect or not, at any point after it was called.

type kvInput struct {
	Kind   string // get, put, cas, del
	Key    string
	Value  string // put, cas
	Expect string // cas
	Absent bool   // cas: expects no value
}

type kvOutput struct {
	Unknown bool   // the write's outcome is unknown
	Found   bool   // get
	Value   string // get
	OK      bool   // cas swapped, del found
}

type kvState struct {
	Exists bool
	Value  string
}

var kvModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{kvState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(kvState), in.(kvInput), out.(kvOutput)
		switch i.Kind {
		case "get":
			if o.Found == s.Exists && (!o.Found || o.Value == s.Value) {
				return []any{s}
			}
			return nil
		case "put":
			next := kvState{Exists: true, Value: i.Value}
			if o.Unknown {
				return []any{s, next}
			}
			return []any{next}
		case "cas":
			applies := (i.Absent && !s.Exists) || (!i.Absent && s.Exists && s.Value == i.Expect)
			next := kvState{Exists: true, Value: i.Value}
			switch {
			case o.Unknown && applies:
				return []any{s, next}
			case o.Unknown:
				return []any{s}
			case o.OK && applies:
				return []any{next}
			case !o.OK && !applies:
				return []any{s}
			}
			return nil
		case "del":
			switch {
			case o.Unknown:
				return []any{s, kvState{}}
			case o.OK == s.Exists:
				return []any{kvState{}}
			}
			return nil
		}
		return nil
	},
	Equal: func(a, b any) bool { return a.(kvState) == b.(kvState) },
	DescribeOperation: func(in, out any) string {
		i, o := in.(kvInput), out.(kvOutput)
		res := fmt.Sprint(o.OK)
		if o.Unknown {
			res = "unknown"
		}
		switch i.Kind {
		case "get":
			if !o.Found {
				return fmt.Sprintf("get(%s) -> absent", i.Key)
			}
			return fmt.Sprintf("get(%s) -> %q", i.Key, o.Value)
		case "put":
			return fmt.Sprintf("put(%s, %q) -> %s", i.Key, i.Value, map[bool]string{true: "unknown", false: "ok"}[o.Unknown])
		case "cas":
			exp := fmt.Sprintf("%q", i.Expect)
			if i.Absent {
				exp = "absent"
			}
			return fmt.Sprintf("cas(%s, %s -> %q) -> %s", i.Key, exp, i.Value, res)
		}
		return fmt.Sprintf("del(%s) -> %s", i.Key, res)
	},
	DescribeState: func(st any) string {
		s := st.(kvState)
		if !s.Exists {
			return "absent"
		}
		return fmt.Sprintf("%q", s.Value)
	},
}
