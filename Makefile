.PHONY: build test
build:
	go build -o bin/stamp ./cmd/stamp
test:
	go test ./...
