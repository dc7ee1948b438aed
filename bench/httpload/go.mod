module actonce.dev/bench/httpload

go 1.22
