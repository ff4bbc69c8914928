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

func TestByteRangeHeader(t *testing.T) {
	for _, tc := range []struct {
		r    ByteRange
		want string
	}{
		{ByteRange{0, -1}, ""},
		{ByteRange{0, 10}, "bytes=0-9"},
		{ByteRange{0, 1}, "bytes=0-0"},
		{ByteRange{5, 1}, "bytes=5-5"},
		{ByteRange{7, -1}, "bytes=7-"},
	} {
		if got := tc.r.Header(); got != tc.want {
			t.Errorf("%+v.Header() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestHTTPAnswer(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		contentRange        string
		contentLength       *int64
		start, size, length int64
		ok                  bool
	}{
		{"", n(10), 0, 10, 10, true},           // the whole object
		{"", nil, 0, -1, -1, true},             // the whole object, size untold
		{"bytes 2-4/10", n(3), 2, 10, 3, true}, // a range
		{"bytes 2-4/10", nil, 2, 10, -1, true},
		{"bytes 10-9/10", n(0), 10, 10, 0, true}, // Azurite's empty range at the end
		{"bytes 2-4/*", n(3), 0, 0, 0, false},
	} {
		a, err := HTTPAnswer(nil, "v", tc.contentRange, tc.contentLength)
		if (err == nil) != tc.ok || (tc.ok && (a.Start != tc.start || a.Size != tc.size || a.Length != tc.length || a.Token != "v")) {
			t.Errorf("HTTPAnswer(%q, %v) = %+v, %v; want start %d size %d length %d (ok %v)", tc.contentRange, tc.contentLength, a, err, tc.start, tc.size, tc.length, tc.ok)
		}
	}
}
