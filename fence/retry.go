package fence

import "strconv"

func quote(s string) string { return strconv.Quote(s) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
