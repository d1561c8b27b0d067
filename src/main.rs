fn main() -> std::process::ExitCode {
    kascade::main()
}
