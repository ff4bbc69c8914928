package blobstore

import "strings"

// Sub returns a view of c under prefix: every key is stored as prefix+key and
// listed without it. The prefix must be a valid key; a trailing '/' is added.
// The view shares c's driver and middleware. Sub is how a shard's keys live
// under <root>/<shard>/ and how the conformance command keeps its scratch
// keys apart.
func Sub(c *Container, prefix string) (*Container, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidateKey(prefix); err != nil {
		return nil, err
	}
	s := *c
	s.loc += prefix + "/"
	s.prefix += prefix + "/"
	return &s, nil
}
