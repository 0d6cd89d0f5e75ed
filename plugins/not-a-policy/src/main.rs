fn main() {
    println!("I am a WASI command, not a Tessera policy");
}
