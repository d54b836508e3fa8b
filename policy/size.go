package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes a size may carry: binary (Ki, Mi, Gi, Ti) and
// decimal (k, M, G, T), as in Kubernetes quantities. Longer suffixes come
// first so that "Mi" is not read as "M".
var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// parseSize reads a byte count written as digits with an optional unit:
// "64000", "256Mi", "1Gi", "10M". It accepts no sign, fraction, exponent or
// space; the result fits in an int64. The error does not name the field;
// callers prefix it.
func parseSize(s string) (int64, error) {
	digits, factor := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			digits, factor = strings.TrimSuffix(s, u.suffix), u.factor
			break
		}
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a size; want digits with an optional unit Ki, Mi, Gi, Ti, k, M, G or T, e.g. 256Mi", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/factor {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * factor, nil
}

// formatSize writes n the way a person would write it in a policy file:
// with the largest binary unit that divides it exactly, else as plain
// digits. parseSize(formatSize(n)) == n for every n >= 0.
func formatSize(n int64) string {
	for i := 3; i >= 0; i-- {
		u := sizeUnits[i]
		if n != 0 && n%u.factor == 0 {
			return strconv.FormatInt(n/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
