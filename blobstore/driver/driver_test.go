package driver

import "testing"

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in          string
		start, size int64
		ok          bool
	}{
		{"bytes 0-9/10", 0, 10, true},
		{"bytes 2-4/10", 2, 10, true},
		{"bytes 5-9/10", 5, 10, true},
		{"bytes 0-0/1", 0, 1, true},
		{"bytes 10-9/10", 10, 10, true}, // Azurite's answer to a range from the end
		{"bytes */10", 0, 0, false},
		{"bytes 0-10/10", 0, 0, false},
		{"bytes 5-3/10", 0, 0, false},
		{"bytes 0-9/*", 0, 0, false},
		{"bytes 5-9/*", 0, 0, false},
		{"items 0-9/10", 0, 0, false},
		{"", 0, 0, false},
	} {
		start, size, ok := ParseContentRange(tc.in)
		if ok != tc.ok || start != tc.start || size != tc.size {
			t.Errorf("ParseContentRange(%q) = %d, %d, %v; want %d, %d, %v", tc.in, start, size, ok, tc.start, tc.size, tc.ok)
		}
	}
}
