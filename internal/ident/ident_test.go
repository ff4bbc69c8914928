package ident

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		s        string
		optional bool
		ok       bool
	}{
		{"a1", false, true},
		{"idx/0", false, true},
		{"", true, true},
		{"", false, false},
		{strings.Repeat("x", MaxLen), false, true},
		{strings.Repeat("x", MaxLen+1), false, false},
		{"a|b", false, false},
		{"a\nb", false, false},
		{"a\x7fb", false, false},
		{"\xff", false, false},
		{"ünïcödé", false, true},
	} {
		err := Validate("allocation", c.s, c.optional)
		if (err == nil) != c.ok {
			t.Errorf("Validate(%q, optional %v) = %v, want ok %v", c.s, c.optional, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "allocation")) {
			t.Errorf("Validate(%q) = %v: must wrap ErrInvalidArgument and name what it checked", c.s, err)
		}
	}
}
