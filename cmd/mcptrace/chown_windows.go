package main

import "os"

// chownLike keeps the owner Windows gives a new file: its creator's.
func chownLike(string, os.FileInfo) error { return nil }
