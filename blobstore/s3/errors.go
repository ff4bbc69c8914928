package s3

import (
	"errors"

	"github.com/aws/smithy-go"

	"github.com/shardfence/shardfence/blobstore/internal/s3compat"
)

const credentialHint = "the AWS credential chain, or access_key and secret_key for an emulator"

// answer extracts the HTTP status and S3 error code from an SDK error.
func answer(err error) s3compat.Answer {
	var a s3compat.Answer
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		a.Status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		a.Code, a.Message = ae.ErrorCode(), ae.ErrorMessage()
	}
	return a
}
