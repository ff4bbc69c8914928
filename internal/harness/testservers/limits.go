package testservers

import (
	"strings"

	"github.com/shardfence/shardfence/conformance"
)

// VersityGWLimits are the conformance checks versitygw v1.8.0 (posix
// backend) fails, each matched on its own failure so any other failure
// still fails the test. The s3 driver's tests (local binary) and the e2e
// module's (container) run the suite with them.
func VersityGWLimits() map[string]conformance.Limit {
	return map[string]conformance.Limit{
		"delete-if-match": {
			Match: conformance.AllMention("on a missing key"),
			Why:   "versitygw answers DELETE with If-Match on a missing key with 204, not 412/404; stale tokens on existing keys are refused (see stale-conditional-delete-keeps-the-object)",
		},
		"linearizable": {
			Match: func(d []string) bool {
				for _, x := range d {
					if !strings.Contains(x, "is not linearizable") && !strings.Contains(x, "ExistingObjectIsDirectory") {
						return false
					}
				}
				return len(d) > 0
			},
			Why: "on versitygw v1.8.0 (posix) concurrent Delete and conditional PUTs of one key either give a history that is not linearizable or leave a directory where the object was (409 ExistingObjectIsDirectory); the create and CAS races without Delete pass (create-if-absent-race, cas-increments)",
		},
	}
}
