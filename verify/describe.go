package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

var invNumber = regexp.MustCompile(`[0-9]{19}`)

// DescribeKey shortens the inverted numbers of protocol keys to ~N, so
// fence/fence__9223372036854775806 reads fence/fence__~1.
func DescribeKey(key string) string {
	return invNumber.ReplaceAllStringFunc(key, func(s string) string {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return s
		}
		return "~" + strconv.FormatInt(math.MaxInt64-v, 10)
	})
}

// DescribeBody summarizes a body for a trace: fence records and md records
// by their fields, anything else by size and hash.
func DescribeBody(key string, body []byte) string {
	if rest, ok := bytes.CutPrefix(body, []byte("shardfence.fence|")); ok {
		// tag|version|shard|term|allocation|node|seq|gen|nonce
		f := strings.Split(string(rest), "|")
		if len(f) == 8 {
			return fmt.Sprintf("{T%s owner=%s seq=%s gen=%s nonce=%s}", f[2], f[3], f[5], f[6], f[7])
		}
	}
	if strings.HasPrefix(key, layout.MDPrefix) {
		if md, err := translog.DecodeMD(Shard, key, body); err == nil {
			if md.Kind == translog.KindPoison {
				return fmt.Sprintf("{poison sealed_by=T%d}", md.SealedBy)
			}
			return fmt.Sprintf("{sync by=%s seq=%d+%d}", md.Allocation, md.FirstSeqNo, md.OpCount)
		}
	}
	h := sha256.Sum256(body)
	return fmt.Sprintf("{%d bytes #%s}", len(body), hex.EncodeToString(h[:3]))
}

// Shard is the shard id every scenario of this package writes; traces
// decode md bodies with it.
const Shard = "s1"
