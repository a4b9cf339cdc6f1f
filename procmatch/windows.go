package procmatch

import (
	"strings"
)

// Windows images are matched as Windows names them: case does not count,
// a program is the same with or without its .exe, .cmd or .bat, and paths
// use '\'. Match and First read an image whose filename or argv[0] is a
// Windows path (a drive letter, a UNC or NT path) both as given and as
// portable reads it (a pattern matches either reading; a Not pattern
// vetoes if it matches either), so the rules written for Linux names
// match it: comm "claude" matches
// claude.exe, exe "claude/versions/*" matches
// C:\Users\me\.local\share\claude\versions\2.1.3.exe, argv0-anchored
// patterns see argv[0] as its program name ("cmd", "npx", "node"), and
// script paths in later arguments use '/'.

// isWindowsPath: a drive path (C:\, C:/), a UNC path (\\server\) or an
// NT path (\Device\…, \??\…).
func isWindowsPath(p string) bool {
	if len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') && isLetter(p[0]) {
		return true
	}
	return strings.HasPrefix(p, `\\`) || strings.HasPrefix(p, `\Device\`) || strings.HasPrefix(p, `\??\`)
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// windowsProgram is a program's name as rules compare it: lower case,
// without its directory and its executable extension.
func windowsProgram(p string) string {
	p = strings.ToLower(p)
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	for _, ext := range []string{".exe", ".cmd", ".bat", ".com"} {
		if s, ok := strings.CutSuffix(p, ext); ok && s != "" {
			return s
		}
	}
	return p
}

// windowsPath is a path as rules compare it: lower case, with '/', and
// the last component's executable extension removed.
func windowsPath(p string) string {
	if p == "" {
		return ""
	}
	p = strings.ReplaceAll(strings.ToLower(p), `\`, "/")
	dir, file := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, file = p[:i+1], p[i+1:]
	}
	return dir + windowsProgram(file)
}

// portable returns im as rules read a Windows image, and whether im is
// one (otherwise it returns im unchanged).
func portable(im Image) (Image, bool) {
	win := isWindowsPath(im.Filename) || len(im.Argv) > 0 && isWindowsPath(im.Argv[0])
	if !win {
		return im, false
	}
	out := Image{Filename: windowsPath(im.Filename), Comm: windowsProgram(im.Comm)}
	if len(im.Argv) > 0 {
		out.Argv = make([]string, len(im.Argv))
		out.Argv[0] = windowsProgram(im.Argv[0])
		for i, a := range im.Argv[1:] {
			if isWindowsPath(a) {
				a = strings.ReplaceAll(a, `\`, "/")
			}
			out.Argv[i+1] = a
		}
	}
	return out, true
}
