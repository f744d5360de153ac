module gmpbench

go 1.26
