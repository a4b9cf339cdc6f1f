package history

// DefaultDir is on disk, under ProgramData: the agent makes it for SYSTEM
// and Administrators alone, and refuses it when anyone else could change
// it or a directory above it (agent/securedir_windows.go).
const DefaultDir = `C:\ProgramData\mcptrace\history`
