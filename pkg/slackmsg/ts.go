package slackmsg

import (
	"strconv"
	"strings"
)

// CompareTS orders two Slack message timestamps ("seconds.micros")
// numerically: -1, 0 or +1. A string compare would put "999.1" after
// "1000.1"; Slack's own history and cursors order by the number.
func CompareTS(a, b string) int {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	ai, _ := strconv.ParseInt(as, 10, 64)
	bi, _ := strconv.ParseInt(bs, 10, 64)
	switch {
	case ai < bi:
		return -1
	case ai > bi:
		return 1
	}
	af, bf = (af + "000000")[:6], (bf + "000000")[:6]
	return strings.Compare(af, bf)
}
