package containers

// ValidID reports whether s is a full container ID: exactly 64 lowercase
// hex digits. Only such IDs are put into a URL path or matched against a
// cgroup.
func ValidID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
