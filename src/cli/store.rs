//! `jitccl store serve`: a standalone rendezvous store server (PyTorch TCPStore protocol),
//! for jobs whose ranks all connect to one address.

use std::process::ExitCode;

use jitccl::store::Server;

#[derive(clap::Subcommand)]
pub enum StoreCmd {
    /// Serve a key-value store until interrupted.
    Serve {
        /// Address to listen on (all interfaces by default, so other machines can join).
        #[arg(long, default_value = "0.0.0.0")]
        host: String,
        /// Port to listen on (0: any free port; the one chosen is printed).
        #[arg(short, long, default_value_t = 29500)]
        port: u16,
    },
}

impl StoreCmd {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        match self {
            StoreCmd::Serve { host, port } => {
                let server = Server::bind((host.as_str(), port)).map_err(|e| e.to_string())?;
                println!("jitccl store: serving on {}", server.local_addr());
                server.join().map_err(|e| e.to_string())?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}
