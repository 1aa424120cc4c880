//! `jitccl store serve`: a standalone rendezvous store server (PyTorch TCPStore protocol),
//! for jobs whose ranks all connect to one address; with `--auth`, for jitccl's clients
//! that prove that they know the job's key only.

use std::process::ExitCode;

use jitccl::auth::JobKey;
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
        /// Serve only clients that prove that they know the job's key (JITCCL_AUTH_KEY or
        /// JITCCL_AUTH_KEY_FILE): jitccl's, given the key. PyTorch's clients cannot, and are
        /// refused; without it, the protocol is PyTorch's, unchanged.
        #[arg(long)]
        auth: bool,
    },
}

impl StoreCmd {
    pub(super) fn run(self) -> Result<ExitCode, String> {
        match self {
            StoreCmd::Serve { host, port, auth } => {
                let key = match auth {
                    true => Some(
                        JobKey::from_env()
                            .map_err(|e| e.to_string())?
                            .ok_or("--auth needs the job's key: set JITCCL_AUTH_KEY or JITCCL_AUTH_KEY_FILE")?,
                    ),
                    false => None,
                };
                let server = Server::bind_keyed((host.as_str(), port), key).map_err(|e| e.to_string())?;
                println!("jitccl store: serving on {}", server.local_addr());
                server.join().map_err(|e| e.to_string())?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}
