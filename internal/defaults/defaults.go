// Package defaults is the one rule for options whose zero value means
// "the default": an unset count, size or duration takes the default, and
// a set one is kept.
package defaults

// Number is what a count, a size or a duration is.
type Number interface {
	~int | ~int32 | ~int64 | ~uint32 | ~uint64 | ~float64
}

// Positive sets *v to d when *v is zero or negative: for the options no
// negative value has a meaning of its own.
func Positive[T Number](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Zero sets *v to d when *v is zero, and keeps a negative value: for the
// options where a negative value means something (never, none, off).
func Zero[T Number](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}
