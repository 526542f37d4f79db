package simulate

import "testing"

// TestCompletedIndexesForm: upstream's compressed intervals, and back.
func TestCompletedIndexesForm(t *testing.T) {
	for _, tc := range []struct {
		set  []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 2, 3, 5}, "0-3,5"},
		{[]int{1, 3, 4, 5, 7, 8}, "1,3-5,7,8"},
	} {
		set := map[int]bool{}
		for _, ix := range tc.set {
			set[ix] = true
		}
		if got := formatIndexes(set); got != tc.want {
			t.Errorf("formatIndexes(%v) = %q, want %q", tc.set, got, tc.want)
		}
		if got := parseIndexes(tc.want, 100); len(got) != len(tc.set) {
			t.Errorf("parseIndexes(%q) = %v, want %v", tc.want, got, tc.set)
		}
	}
}
