// Command hello stands in for the manager binary in the image test (it builds in a second).
package main

import "fmt"

func main() { fmt.Println("hello from the image") }
